# training_platform: one image for every service (api, worker, beat, the one-shot migration). See docker-compose.yml.
#
#   docker build -t training-platform .
#   docker run --rm -p 8000:8000 -v tp-data:/data training-platform          # tp api (SQLite + embedded defaults)
#
# CPU build. torch comes first, pinned, from the PyTorch CPU index (PyPI's Linux wheel pulls several GB of CUDA
# libraries); the project is then installed with constraints so no dependency can upgrade or replace it.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /app

# 1. torch, pinned (keep in step with constraints.txt, the CPU stack; pyproject.toml gives only a range).
RUN pip install --index-url https://download.pytorch.org/whl/cpu torch==2.13.0

# 2. the project. constraints.txt pins torch==2.13.0 (satisfied by the 2.13.0+cpu installed above), transformers and
#    packaging<26.
COPY constraints.txt pyproject.toml README.md ./
COPY training_platform ./training_platform
COPY configs ./configs
RUN pip install -c constraints.txt '.[verl]' \
    && pip install --no-deps verl==0.9.1 \
    && python -c "import sys, torch; v = torch.__version__; sys.exit(0 if v == '2.13.0+cpu' else f'torch {v}')" \
    && tp --help > /dev/null

# 3. run as a non-root user; everything the platform writes goes to the /data volume.
RUN groupadd --gid 1000 tp \
    && useradd --uid 1000 --gid tp --create-home --shell /usr/sbin/nologin tp \
    && mkdir -p /data \
    && chown tp:tp /data
ENV TP_DATA_DIR=/data \
    HF_HOME=/data/.cache/huggingface
VOLUME ["/data"]
USER tp

EXPOSE 8000
CMD ["tp", "api", "--host", "0.0.0.0"]
