"""What a backend is, as the core sees it.

A backend is an object registered through the ``rammer.backends`` plugin hook
(see :mod:`rammer.hookspecs`).  The core reads its :class:`Capabilities` as
data and calls :meth:`Backend.compile`; it never branches on a backend's name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .errors import CompileError, RammerError
from .ir import Graph, Node
from .kernel_families import generic_families
from .kernels_generic import candidates_from
from .passes import Pass, PipelineResult, run_pipeline
from .plugin_host import generation, plugin_manager
from .vdevice import PRESETS, VDevice, get_preset

if TYPE_CHECKING:  # pragma: no cover
    from .rtask import RKernel


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, as data the core, the CLI and the conformance
    suite read.  Unknown keys go in ``extra``."""

    #: Op types the backend compiles itself; ``None`` means every op in the
    #: registry (e.g. the reference interpreter).
    ops: frozenset[str] | None = None
    #: Ops outside ``ops`` still run through the reference implementation
    #: between compiled segments.
    reference_fallback: bool = False
    dtypes: frozenset[str] = frozenset({"float32"})
    #: Tolerance of results against the reference backend.
    rtol: float = 1e-5
    atol: float = 1e-6
    #: The kind of device it runs on ("cpu", "gpu", "ipu", "mcu").
    device: str = "cpu"
    #: Whether it lowers to rTask schedules (and so has vDevices and rKernels).
    schedules: bool = False
    #: Source language of generated code, if it emits source ("python", "cuda", "c"...).
    emits_source: str | None = None
    #: Executable that compiles the generated source, if any ("nvcc", "hipcc"...).
    source_compiler: str | None = None
    #: Whether compiled programs are cached on disk.
    compile_cache: bool = False
    #: vDevice presets the backend knows (first is the default).
    vdevice_presets: tuple[str, ...] = ()
    #: Keyword options ``compile`` accepts (``rammer.compile(..., **options)``);
    #: ``None`` means undeclared (the backend checks them itself).
    options: frozenset[str] | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ops"] = None if self.ops is None else sorted(self.ops)
        d["dtypes"] = sorted(self.dtypes)
        d["options"] = None if self.options is None else sorted(self.options)
        d["extra"] = dict(self.extra)
        return d

    def summary(self) -> str:
        """One short line for tables."""
        parts = [self.device]
        parts.append("all ops" if self.ops is None else f"{len(self.ops)} ops")
        if self.reference_fallback:
            parts.append("fallback")
        if self.schedules:
            parts.append("rTask schedules")
        if self.emits_source:
            parts.append(f"emits {self.emits_source}")
        if self.compile_cache:
            parts.append("cache")
        parts.append(",".join(sorted(self.dtypes)))
        return "; ".join(parts)


class UnknownOptionError(CompileError, TypeError):
    """``rammer.compile(..., **options)`` named an option the backend does not accept.  A
    :class:`CompileError` like every compile failure, and a ``TypeError`` as Python raises for an
    unexpected keyword argument."""


def check_options(backend_name: str, options: Mapping[str, Any], known: AbstractSet[str]) -> None:
    """Raise :class:`UnknownOptionError` naming the options of ``options`` that are not in ``known``
    and listing the known ones; every backend checks its keyword options with this."""
    unknown = sorted(set(options) - set(known))
    if unknown:
        raise UnknownOptionError(f"unknown option(s) {unknown} for backend '{backend_name}' "
                                 f"(it accepts: {', '.join(sorted(known)) or 'none'})")


@dataclass(frozen=True)
class Availability:
    ok: bool
    #: Why not, when ``ok`` is False: a missing package, no device...
    reason: str = ""


@dataclass(frozen=True)
class ArtifactParts:
    """What a backend saves of a compiled model (see :mod:`rammer.artifact`)."""

    format: str
    #: name -> contents (bytes, or a contiguous array for large ones: written without a copy)
    files: Mapping[str, Any]
    compat: Mapping[str, str]
    #: Whether loading needs the ONNX model (saved beside the files, imported again on load); a
    #: backend whose files hold all its program needs says False, and the file holds the weights once.
    needs_model: bool = True


class Executable(Protocol):
    """What a backend's ``compile`` returns: runs validated feeds.

    A backend that can write outputs straight into caller-owned arrays accepts
    ``run(feeds, outputs={name: array})`` (arrays already checked by the core);
    otherwise the core copies into them.  An optional ``report`` (dict, or a
    method returning one) may list ``fallbacks`` (see :mod:`rammer.diagnostics`).
    """

    #: The graph it runs (the core reads it where a cache hit imported none).
    graph: Graph

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]: ...


class Backend(ABC):
    """Base class for backends.  Subclasses set the class attributes and
    implement :meth:`compile`."""

    name: str = ""
    description: str = ""
    capabilities: Capabilities = Capabilities()
    #: Among available backends, the one with the highest priority is the
    #: default of ``--backend``.
    default_priority: int = 0
    #: The graph rewrites the backend runs before lowering, in order, as data
    #: (:class:`rammer.passes.Pass` objects; see :meth:`prepare_graph`).
    graph_passes: tuple[Pass, ...] = ()

    def availability(self) -> Availability:
        """Whether the backend can run on this machine, and if not why."""
        return Availability(True)

    def supports(self, node: Node) -> bool:
        ops = self.capabilities.ops
        return ops is None or node.op_type in ops

    def unsupported_nodes(self, graph: Graph) -> list[Node]:
        if self.capabilities.reference_fallback:
            return []
        return [n for n in graph.nodes if not self.supports(n)]

    @abstractmethod
    def compile(self, graph: Graph, options: Mapping[str, Any]) -> Executable:
        """Compile a verified graph.  ``options`` are the backend's keyword
        options from ``rammer.compile(..., **options)``."""

    def __repr__(self) -> str:
        return f"<backend {self.name!r}>"

    # -- compiling a model known by its key, before importing it ----------------------
    def compile_cache_dir(self, options: Mapping[str, Any]) -> str | None:
        """The folder of this backend's compile cache for ``options`` (where the core also keeps
        its memo of model files' digests, :mod:`rammer.model_key`), or None when no cache is used:
        then :meth:`compile_keyed` is not called."""
        return None

    def compile_keyed(self, model_key: str, options: Mapping[str, Any],
                      load_graph: Callable[[], Graph]) -> Executable:
        """Compile the model that ``model_key`` names (:func:`rammer.model_key.model_key`: its bytes
        and import settings).  ``load_graph()`` imports it (what :meth:`compile` would be given); a
        backend whose cache holds a program for that key returns it without calling ``load_graph``.
        Such an executable offers the graph's inputs and outputs as ``executable.graph`` and the
        whole graph through ``executable.full_graph()`` (imported when asked)."""
        return self.compile(load_graph(), options)

    # -- saved compiled models (rammer.artifact); a backend opts in -------------------
    def artifact_format(self) -> str:
        """The version of this backend's saved-program files (a change refuses older files)."""
        return ""

    def artifact_compat(self) -> dict[str, str]:
        """Facts of this machine a saved program depends on (a mismatch refuses the file)."""
        return {}

    def export_artifact(self, executable: Any) -> ArtifactParts | None:
        """The files that rebuild ``executable`` without compiling, or None when it cannot be saved."""
        return None

    def import_artifact(self, graph: Graph | None, files: Mapping[str, Any], options: Mapping[str, Any]) -> Executable:
        """The executable ``export_artifact`` saved, rebuilt from its files and checked.  ``graph``: the
        model re-imported (None when ``needs_model`` was False); ``files``: small files as bytes, large
        ones as :class:`rammer.block_crc.BlockChecked` ranges to read (and check) where they are used."""
        raise NotImplementedError(f"backend '{self.name}' cannot load saved programs")

    def prepare_graph(self, graph: Graph, verify: bool = False) -> PipelineResult:
        """``graph`` after :attr:`graph_passes` (each timed; ``Graph.verify()`` after each when
        ``verify``).  Override to choose the pipeline per graph or per option."""
        return run_pipeline(graph, self.graph_passes, verify)

    # -- rTask scheduling (rammer.schedule); defaults suit any backend ---------
    def vdevice(self, preset: str | None = None) -> VDevice:
        """The vDevice to schedule for: ``preset`` (a name of
        :data:`rammer.vdevice.PRESETS` or a ``.json`` file), by default the
        first of ``capabilities.vdevice_presets``, else ``"cpu"``.  A backend
        that schedules refuses a vDevice of another device kind
        (:meth:`check_vdevice`)."""
        presets = self.capabilities.vdevice_presets
        return self.check_vdevice(get_preset(preset or (presets[0] if presets else "cpu")))

    def check_vdevice(self, vdevice: VDevice) -> VDevice:
        """``vdevice``, unless this backend schedules rTasks for another kind of device: its
        rKernels are sized for its own device (a CPU's L2, not a GPU's shared memory)."""
        if self.capabilities.schedules and vdevice.kind != self.capabilities.device:
            same = [n for n, d in PRESETS.items() if d.get("kind") == self.capabilities.device]
            raise RammerError(
                f"backend '{self.name}' schedules for {self.capabilities.device} devices, but vDevice "
                f"'{vdevice.name}' is a {vdevice.kind}; choose a {self.capabilities.device} preset "
                f"({', '.join(same) or 'none known'}), or leave out --backend to schedule with a backend "
                f"for {vdevice.kind} devices (the core rKernel families when none is installed)")
        return vdevice

    def rkernel_families(self) -> list[Any]:
        """rKernel families for this backend: those plugins register through
        ``rammer_register_rkernels`` for it, then the generic ones of
        :mod:`rammer.kernel_families`."""
        pm, gen = plugin_manager(), generation()
        cached = getattr(self, "_rkernel_families", None)
        if cached is not None and cached[0] is pm and cached[1] == gen:
            return cached[2]
        found: list[Any] = []
        pm.hook.rammer_register_rkernels(backend=self.name, register=found.append)
        families = found + generic_families()
        self._rkernel_families = (pm, gen, families)
        return families

    def rkernels(self, node: Node, graph: Graph, vdevice: VDevice) -> list[RKernel]:
        """Candidate rKernels for ``node`` on ``vdevice`` (every family's
        offer; the whole op as one rTask when no family applies)."""
        return candidates_from(self.rkernel_families(), node, graph, vdevice)
