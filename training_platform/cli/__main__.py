from training_platform.cli.app import main

main()
