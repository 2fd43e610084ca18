"""A compiled model as a Ray Serve deployment speaking KServe v2 (needs the ``serve`` extra).

Each replica is a Ray actor process that compiles the model itself (the disk
compile cache makes every replica after the first fast) and runs it on its
own ``veus`` vEUs; Ray reserves that many CPUs per replica, so replicas do
not share cores.  With ``batch=B`` the model is compiled for batch ``B`` and
``@serve.batch`` gathers concurrent requests, padded to ``B`` rows
(:mod:`.batching`).  Routes (KServe v2 / Triton HTTP)::

    GET  /v2/health/live, /v2/health/ready
    GET  /v2/models/{name}, /v2/models/{name}/ready
    POST /v2/models/{name}/infer
"""

# No ``from __future__ import annotations`` here: FastAPI reads the routes' parameter
# annotations (``request: Request``) at run time, and strings would turn them into query fields.
import asyncio
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, cast

import ray
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from ray import serve

import rammer

from ..errors import FeedError, RammerError
from .batching import batch_size, compile_batch_sizes, run_batched
from .kserve import decode_request, encode_response, model_metadata

__all__ = ["ServeConfig", "build_app", "start", "stop"]


@dataclass(frozen=True)
class ServeConfig:
    """What a deployment serves, and how."""

    model: bytes  # the ONNX model
    name: str = "model"
    backend: str | None = None
    veus: int = 1
    replicas: int = 1
    batch: int | None = None
    max_wait_ms: float = 5.0
    input_shapes: dict[str, tuple[int, ...]] | None = None
    options: dict[str, Any] = field(default_factory=dict)


api = FastAPI(title="rammer")


@api.exception_handler(HTTPException)
async def _kserve_error(request: Request, exc: HTTPException) -> JSONResponse:
    """Errors as KServe v2 clients read them: ``{"error": "..."}`` with the HTTP status
    (FastAPI's own form is ``{"detail": ...}``)."""
    return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code)


@serve.deployment
@serve.ingress(api)
class RammerModel:
    """One replica: a compiled model and the KServe v2 routes."""

    def __init__(self, config: ServeConfig):
        self.config = config
        shapes = dict(config.input_shapes or {})
        options = dict(config.options)
        be = rammer.plugins.get_backend(config.backend)
        if be.capabilities.options is None or "veus" in be.capabilities.options:
            options.setdefault("veus", config.veus)
        if config.batch:
            self.model = compile_batch_sizes(config.model, [config.batch], config.backend, **options)[config.batch]
            self.batch: int | None = batch_size(self.model)
            # serve.batch's wrapper has these setters; Ray's annotations call it a plain callable
            self.batched.set_max_batch_size(self.batch)  # type: ignore[attr-defined]
            self.batched.set_batch_wait_timeout_s(config.max_wait_ms / 1e3)  # type: ignore[attr-defined]
        else:
            self.model = rammer.compile(config.model, backend=config.backend, input_shapes=shapes or None, **options)
            self.batch = None
        self.pid = os.getpid()

    @serve.batch(max_batch_size=8, batch_wait_timeout_s=0.005)
    async def batched(self, requests: list[dict]) -> list[dict]:
        inputs = self.model.inputs
        # only a deployment with a batch size routes requests here
        return await asyncio.to_thread(run_batched, self.model.run, inputs, requests, cast(int, self.batch))

    def _check_name(self, name: str) -> None:
        if name != self.config.name:
            raise HTTPException(404, f"unknown model {name!r} (this server has {self.config.name!r})")

    @api.get("/v2/health/live")
    async def live(self) -> dict:
        return {"live": True}

    @api.get("/v2/health/ready")
    async def ready(self) -> dict:
        return {"ready": True}

    @api.get("/v2/models/{name}")
    async def metadata(self, name: str) -> dict:
        self._check_name(name)
        return model_metadata(name, self.model.inputs, self.model.outputs, f"rammer_{self.model.backend.name}",
                              batch_dim=self.batch is not None)

    @api.get("/v2/models/{name}/ready")
    async def model_ready(self, name: str) -> dict:
        self._check_name(name)
        return {"name": name, "ready": True}

    @api.post("/v2/models/{name}/infer")
    async def infer(self, name: str, request: Request) -> dict:
        self._check_name(name)
        try:
            body = await request.json()
        except ValueError:
            raise HTTPException(400, "the request body is not JSON") from None
        try:
            feeds, names, request_id = decode_request(body, self.model.inputs, batch_dim=self.batch is not None)
            if self.batch is not None:
                results = await self.batched(feeds)
            else:
                results = await asyncio.to_thread(self.model.run, feeds)
            out = encode_response(name, results, names, request_id)
        except FeedError as exc:  # the request's fault
            raise HTTPException(400, str(exc)) from None
        except RammerError as exc:  # the model's or the backend's
            raise HTTPException(500, str(exc)) from None
        out["parameters"] = {"replica_pid": self.pid}
        return out


def build_app(config: ServeConfig) -> Any:
    """The Ray Serve application: ``config.replicas`` replicas, ``config.veus`` CPUs each."""
    return RammerModel.options(num_replicas=config.replicas,  # type: ignore[attr-defined]  # a serve.Deployment
                               ray_actor_options={"num_cpus": config.veus},
                               max_ongoing_requests=max(8, 4 * (config.batch or 1))).bind(config)


#: Ray Serve's notice when ``serve.run`` finds Serve already started (see :func:`start`).
_STALE_OPTIONS_NOTICE = "New http_options/controller_options will not be applied"


class _DropStaleOptionsNotice(logging.Filter):
    """Drops Ray Serve's claim that our HTTP options "will not be applied" (they were: see :func:`start`)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return _STALE_OPTIONS_NOTICE not in record.getMessage()


def _wait_for_proxies(timeout_s: float) -> None:
    """Waits until every HTTP proxy of Serve is healthy (Serve's controller keeps starting one after
    ``serve.start`` gave up waiting on it), or raises TimeoutError naming the proxies' states."""
    deadline = time.monotonic() + timeout_s
    while True:
        proxies = serve.status().proxies
        if proxies and all(str(getattr(v, "value", v)) == "HEALTHY" for v in proxies.values()):
            return
        if time.monotonic() > deadline:
            states = ", ".join(f"{node}: {getattr(v, 'value', v)}" for node, v in proxies.items()) or "none started"
            raise TimeoutError(f"Ray Serve's HTTP proxy was not ready after {timeout_s:.0f} s ({states}); "
                               "the machine may be overloaded: retry, or pass a longer proxy_timeout_s")
        time.sleep(0.5)


def start(config: ServeConfig, host: str = "127.0.0.1", port: int = 8000, address: str | None = None,
          proxy_timeout_s: float = 300.0) -> str:
    """Start Ray (locally on 127.0.0.1 with usage statistics off, unless ``address`` names a
    cluster) and the deployment; returns the URL of the inference route.  Stop it with :func:`stop`.
    ``proxy_timeout_s`` bounds the wait for Serve's HTTP proxy past Serve's own 60 s."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    # serve.shutdown() waits on a controller call that ends by design when the controller kills
    # itself; as the controller retries calls forever, Ray (2.x) then tells the driver that
    # "ServeController.graceful_shutdown failed ... will be retried" on every clean stop.  This
    # switch (read by the driver's core worker at ray.init) keeps such retry notices out of the
    # driver's output; a call that really fails still raises.
    os.environ.setdefault("RAY_enable_output_error_log_if_still_retry", "0")
    # Serve's controller kills an HTTP proxy that is not ready within 5 s (health checks: 10 s), and
    # serve.start then fails with "ActorDiedError ... killed by ray.kill": on a 2-core machine busy with
    # other work, a local Ray's proxy takes longer than that to start (seen in CI beside a second test
    # worker).  A local cluster started here inherits these from this process's environment.
    os.environ.setdefault("RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60")
    os.environ.setdefault("RAY_SERVE_PROXY_HEALTH_CHECK_TIMEOUT_S", "60")

    if not ray.is_initialized():
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(address="local", include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False,
                     num_cpus=max(os.cpu_count() or 1, config.replicas * config.veus))
    # serve.start is the only public way to give the proxy's host and port; serve.run then starts
    # Serve again without options, finds ours running and logs that "new http_options will not be
    # applied" though it passed none and ours are in force.  That one line is dropped, nothing else.
    try:
        serve.start(http_options={"host": host, "port": port})
    except TimeoutError:  # Serve gives its HTTP proxy 60 s: on a busy machine, give it longer
        _wait_for_proxies(proxy_timeout_s)
    serve_logger = logging.getLogger("ray.serve")
    notice_filter = _DropStaleOptionsNotice()
    serve_logger.addFilter(notice_filter)
    try:
        serve.run(build_app(config), name=config.name, route_prefix="/")
    finally:
        serve_logger.removeFilter(notice_filter)
    return f"http://{host}:{port}/v2/models/{config.name}/infer"


def stop(shutdown_ray: bool = True) -> None:
    """Stop the deployment and Serve (replicas finish their requests), then, with
    ``shutdown_ray``, this process's connection to Ray (and the local Ray it started)."""

    serve.shutdown()  # before ray.shutdown: Serve's controller is a Ray actor
    if shutdown_ray:
        ray.shutdown()
