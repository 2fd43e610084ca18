"""The conformance suite (rammer.conformance) as a pytest plugin, tested with
pytester on the toy backend of docs/writing-a-backend.md and broken variants
of it: the suite must pass a correct backend, fail a wrong one, and skip by
declared capability with the reason shown."""

from __future__ import annotations

import importlib.metadata
import os
import re
import textwrap
from pathlib import Path

import pytest

# Imported here, before any in-process pytester run: pytester restores
# sys.modules after each run, and numpy-based extensions cannot be imported
# twice in one process.  Keeping the check modules loaded also keeps their
# cache of ONNX's node cases across runs.
import rammer.conformance.check_node_cases  # noqa: F401
import rammer.conformance.plugin  # noqa: F401
import rammer.zoo  # noqa: F401
from rammer.conformance import check_cache, check_feeds, check_repeat, check_schedules, check_source, check_zoo  # noqa: F401

pytest_plugins = ["pytester"]

DOC = Path(__file__).resolve().parent.parent / "docs" / "writing-a-backend.md"


def _doc_files() -> dict[str, str]:
    """Python blocks of the doc whose first line is '# FILENAME.py'."""
    files = {}
    for block in re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL):
        first = block.splitlines()[0].strip()
        m = re.fullmatch(r"#\s*(\w+\.py)", first)
        if m:
            files[m.group(1)] = block
    return files


def _plugin_args() -> list[str]:
    """Load the plugin with -p unless its pytest11 entry point already does."""
    installed = any(ep.value == "rammer.conformance.plugin"
                    for ep in importlib.metadata.entry_points(group="pytest11"))
    if installed and not os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return []
    return ["-p", "rammer.conformance.plugin"]


#: Plugins of this environment that only slow the inner runs down (hypothesis's
#: summary imports all of hypothesis, assertion-rewritten).
_QUIET = ["-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:hypothesispytest", "-p", "no:benchmark"]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*_plugin_args(), *_QUIET, "--pyargs", "rammer.conformance", "-rsxf", *args)


@pytest.fixture
def toy(pytester: pytest.Pytester) -> pytest.Pytester:
    files = _doc_files()
    assert {"toy_backend.py", "toy_register.py"} <= set(files), "the doc lost its example files"
    for name, text in files.items():
        pytester.makepyfile(**{name[:-3]: text})
    pytester.syspathinsert()
    return pytester


def _variant(pytester: pytest.Pytester, name: str, body: str) -> None:
    """A backend module ``name`` (registered as backend ``name``) built on the toy, and its -p plugin."""
    pytester.makepyfile(**{name: textwrap.dedent(body)})
    pytester.makepyfile(**{f"{name}_register": textwrap.dedent(f"""
        import rammer.plugins
        import {name}

        def pytest_configure(config):
            rammer.plugins.register_plugin({name}, "{name}")

        def pytest_unconfigure(config):
            rammer.plugins.unregister_plugin("{name}")
    """)})


def test_doc_toy_backend_passes_the_suite(toy: pytest.Pytester) -> None:
    result = _run(toy, "-p", "toy_register", "--backend", "toy", "-v")
    outcomes = result.parseoutcomes()
    assert result.ret == 0, result.stdout.str()[-3000:]
    assert outcomes.get("failed", 0) == 0 and outcomes.get("passed", 0) >= 20
    out = result.stdout.str()
    assert "rammer conformance: backend 'toy' from plugin 'toy', available" in out
    # Capability-driven skips, each with its reason.
    assert "outside the backend's declared capabilities.dtypes (float32)" in out
    assert "outside the backend's declared capabilities.ops" in out
    assert "the backend does not declare capabilities.compile_cache" in out
    assert "the backend does not declare capabilities.emits_source" in out
    # The node cases of claimed ops ran, and ops the toy does not claim were not generated.
    result.assert_outcomes(passed=outcomes["passed"], skipped=outcomes.get("skipped", 0),
                           xfailed=outcomes.get("xfailed", 0))
    assert re.search(r"test_node_case\[test_add\] PASSED", out)
    assert re.search(r"test_node_case\[test_matmul_2d\] PASSED", out)
    assert "test_node_case[test_conv" not in out


def test_rammer_backend_option_is_an_alias(toy: pytest.Pytester) -> None:
    result = _run(toy, "-p", "toy_register", "--rammer-backend", "toy", "--rammer-checks", "feeds")
    result.assert_outcomes(passed=6)


def test_wrong_kernel_fails_the_node_cases(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    toy = _doc_files()["toy_backend.py"]
    broken = toy.replace('"Add": lambda a, b: a + b', '"Add": lambda a, b: a - b').replace('name = "toy"',
                                                                                             'name = "badadd"')
    assert broken != toy
    _variant(pytester, "badadd", broken)
    result = _run(pytester, "-p", "badadd_register", "--backend", "badadd", "-k", "node_case and add")
    out = result.stdout.str()
    assert result.ret == 1
    assert re.search(r"FAILED .*test_node_case\[test_add\]", out), out[-3000:]
    assert re.search(r"FAILED .*test_node_case\[test_add_bcast\]", out)
    assert "outputs differ from ONNX's expected outputs" in out


def test_reused_output_buffer_is_caught(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    toy = _doc_files()["toy_backend.py"]
    # Hand out the same array every run: a classic buffer-reuse bug.
    broken = toy.replace(
        "        return {t.name: np.array(values[t.name], dtype=t.dtype) for t in self.graph.outputs}",
        "        out = self.__dict__.setdefault('_out', {})\n"
        "        for t in self.graph.outputs:\n"
        "            buf = out.setdefault(t.name, np.empty(t.shape, t.dtype))\n"
        "            buf[...] = values[t.name]\n"
        "        return dict(out)",
    ).replace('name = "toy"', 'name = "reuse"')
    assert "setdefault" in broken
    _variant(pytester, "reuse", broken)
    result = _run(pytester, "-p", "reuse_register", "--backend", "reuse", "--rammer-checks", "repeat", "-k", "alias")
    result.assert_outcomes(failed=1)
    assert "hands out a buffer it reuses" in result.stdout.str()


def test_unavailable_backend_gets_compile_only_checks(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    toy = _doc_files()["toy_backend.py"]
    offline = toy.replace('name = "toy"', 'name = "offline"').replace(
        "    def compile(self, graph", "    def availability(self):\n"
        "        from rammer.backend import Availability\n"
        "        return Availability(False, 'no toy accelerator in this machine')\n\n"
        "    def compile(self, graph")
    _variant(pytester, "offline", offline)
    result = _run(pytester, "-p", "offline_register", "--backend", "offline")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    assert "NOT available here (no toy accelerator in this machine): compile-only checks" in out
    assert "compiled only: backend 'offline' is not available here" in out
    assert result.parseoutcomes().get("failed", 0) == 0


def test_compile_cache_check_tells_robust_from_fragile(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    toy = _doc_files()["toy_backend.py"]
    cache_code = textwrap.dedent('''
        import os, pickle

        def _cached_compile(graph, robust):
            folder = os.environ["RAMMER_CACHE_DIR"]
            path = os.path.join(folder, graph.name + ".pkl")
            if os.path.exists(path):
                try:
                    with open(path, "rb") as f:
                        ops = pickle.load(f)
                    if ops != [n.op_type for n in graph.nodes]:
                        raise ValueError("stale entry")
                except Exception:
                    if not robust:
                        raise
            with open(path, "wb") as f:
                pickle.dump([n.op_type for n in graph.nodes], f)
    ''')
    for name, robust in (("robustcache", True), ("fragilecache", False)):
        variant = (toy.replace('name = "toy"', f'name = "{name}"')
                   .replace('        device="cpu",\n', '        device="cpu",\n        compile_cache=True,\n')
                   .replace("        return ToyExecutable(graph)",
                            f"        _cached_compile(graph, {robust})\n        return ToyExecutable(graph)")
                   + cache_code)
        _variant(pytester, name, variant)
    good = _run(pytester, "-p", "robustcache_register", "--backend", "robustcache", "--rammer-checks", "cache")
    good.assert_outcomes(passed=3)
    bad = _run(pytester, "-p", "fragilecache_register", "--backend", "fragilecache", "--rammer-checks", "cache")
    assert bad.parseoutcomes().get("failed", 0) >= 2, bad.stdout.str()[-3000:]


def test_emitted_python_source_is_compiled(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    toy = _doc_files()["toy_backend.py"]
    for name, source in (("goodsrc", "x = 1\\n"), ("badsrc", "def broken(:\\n")):
        variant = (toy.replace('name = "toy"', f'name = "{name}"')
                   .replace('        device="cpu",\n', '        device="cpu",\n        emits_source="python",\n')
                   .replace("        self.graph = graph\n",
                            f"        self.graph = graph\n        self.source = '{source}'\n"))
        _variant(pytester, name, variant)
    good = _run(pytester, "-p", "goodsrc_register", "--backend", "goodsrc", "--rammer-checks", "source")
    good.assert_outcomes(passed=1)
    bad = _run(pytester, "-p", "badsrc_register", "--backend", "badsrc", "--rammer-checks", "source")
    bad.assert_outcomes(failed=1)
    assert "SyntaxError" in bad.stdout.str()


def test_declared_schedules_without_a_schedule_never_pass(pytester: pytest.Pytester) -> None:
    pytester.syspathinsert()
    toy = _doc_files()["toy_backend.py"]
    variant = toy.replace('name = "toy"', 'name = "nosched"').replace(
        '        device="cpu",\n', '        device="cpu",\n        schedules=True,\n')
    _variant(pytester, "nosched", variant)
    result = _run(pytester, "-p", "nosched_register", "--backend", "nosched", "--rammer-checks", "schedules",
                  "-k", "tiny")
    outcomes = result.parseoutcomes()
    out = result.stdout.str()
    # Either rammer.schedule.verify exists and the missing .schedule fails, or the skip says why.
    assert outcomes.get("passed", 0) == 0
    assert outcomes.get("failed", 0) == 1 and "has no .schedule" in out or "rammer.schedule" in out


def test_without_backend_nothing_is_collected(pytester: pytest.Pytester) -> None:
    result = _run(pytester)
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["*rammer.conformance: no backend given, so nothing was checked*"])


def test_unknown_backend_is_a_usage_error(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "--backend", "no-such-backend")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*no rammer backend named 'no-such-backend'; registered:*reference*"])


def test_backend_option_taken_by_another_plugin(toy: pytest.Pytester) -> None:
    toy.makepyfile(other_plugin="def pytest_addoption(parser):\n    parser.addoption('--backend', dest='other')\n")
    args = ["-p", "other_plugin"] + _plugin_args() + _QUIET
    result = toy.runpytest(*args, "-p", "toy_register", "--pyargs", "rammer.conformance",
                           "--rammer-backend", "toy", "--rammer-checks", "feeds")
    result.assert_outcomes(passed=6)


def test_entry_point_registration_in_a_fresh_process(toy: pytest.Pytester) -> None:
    """A toy 'installed' with a rammer.backends entry point, as a third-party package would be."""
    dist = toy.path / "toy_backend-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: toy-backend\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[rammer.backends]\ntoy = toy_backend\n")
    result = toy.runpytest_subprocess(*_plugin_args(), *_QUIET, "--pyargs",
                                      "rammer.conformance", "--backend", "toy", "--rammer-checks", "feeds")
    out = result.stdout.str()
    assert result.ret == 0, out[-3000:]
    assert "backend 'toy' from plugin 'toy', available" in out
    assert result.parseoutcomes().get("passed", 0) == 6


def test_unknown_check_name_is_a_usage_error(toy: pytest.Pytester) -> None:
    result = _run(toy, "-p", "toy_register", "--backend", "toy", "--rammer-checks", "feeds,nonsense")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unknown check(s) nonsense in --rammer-checks (known: cache, feeds,*"])
