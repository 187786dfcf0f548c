# One image for every minimq service: mqnamesrv, mqbroker, mqadmin, mqbench.
#   docker build -t minimq .            (docker compose builds it for you: see docker-compose.yml)
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# The project (see .dockerignore for what stays out), installed as a wheel, not editable.
COPY . /src
RUN pip install /src && rm -rf /src

# An unprivileged user; named volumes mounted on these directories inherit their ownership.
RUN useradd --create-home --uid 1000 minimq \
    && mkdir -p /home/minimq/store /home/minimq/logs /home/minimq/namesrv \
    && chown -R minimq:minimq /home/minimq
USER minimq
WORKDIR /home/minimq

# 9876 name server, 10911 broker (listenPort), 5557 broker metrics (metricsPort).
EXPOSE 9876 10911 5557
CMD ["mqnamesrv"]
