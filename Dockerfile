# One image for every minimq service: mqnamesrv, mqbroker, mqadmin, mqbench.
#   docker build -t minimq .            (docker compose builds it for you: see docker-compose.yml)
#   docker build --build-arg MINIMQ_COMPILED=0 -t minimq .   (every module as Python: nothing compiled)

# Stage 1: the wheel. With MINIMQ_COMPILED=1 (the default) its hot path is compiled with mypyc,
# which needs the C compiler and headers of the full python image; the runtime image below has
# neither. The same Debian release and Python build, so the extension modules load there.
FROM python:3.11 AS wheel
ARG MINIMQ_COMPILED=1
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The project (see .dockerignore for what stays out).
COPY . /src
RUN pip install build \
    && HATCH_BUILD_HOOK_ENABLE_MYPYC=${MINIMQ_COMPILED} python -m build --wheel --outdir /dist /src

# Stage 2: the runtime image, with the wheel installed (not editable) and no build tools.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

COPY --from=wheel /dist /dist
RUN pip install /dist/*.whl && rm -rf /dist

# An unprivileged user; named volumes mounted on these directories inherit their ownership.
RUN useradd --create-home --uid 1000 minimq \
    && mkdir -p /home/minimq/store /home/minimq/logs /home/minimq/namesrv \
    && chown -R minimq:minimq /home/minimq
USER minimq
WORKDIR /home/minimq

# 9876 name server, 10911 broker (listenPort), 5557 broker metrics (metricsPort).
EXPOSE 9876 10911 5557
CMD ["mqnamesrv"]
