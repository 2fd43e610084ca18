"""One check of a backend's keyword options (rammer.backend.check_options), used by every backend."""

from __future__ import annotations

import pathlib

import pytest
from helpers import add_relu_model

import rammer
from rammer.backend import UnknownOptionError, check_options
from rammer.errors import CompileError

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_known_options_pass_and_unknown_ones_are_named_with_the_known_ones():
    check_options("toy", {"veus": 2}, {"veus", "policy"})
    check_options("toy", {}, set())
    with pytest.raises(UnknownOptionError, match=r"unknown option\(s\) \['bogus', 'zz'\] for backend 'toy' "
                                                 r"\(it accepts: policy, veus\)"):
        check_options("toy", {"zz": 1, "veus": 2, "bogus": 3}, {"veus", "policy"})
    with pytest.raises(UnknownOptionError, match="it accepts: none"):
        check_options("toy", {"x": 1}, frozenset())


def test_the_error_is_a_compile_error_and_a_type_error():
    assert issubclass(UnknownOptionError, CompileError) and issubclass(UnknownOptionError, TypeError)


def test_a_backend_called_directly_refuses_an_unknown_option_with_the_one_error():
    backend = rammer.plugins.get_backend("reference")
    graph = rammer.load(add_relu_model())
    with pytest.raises(UnknownOptionError, match=r"\['bogus'\] for backend 'reference' \(it accepts: check\)"):
        backend.compile(graph, {"bogus": 1})


def test_no_backend_writes_the_unknown_option_check_again():
    """The check lives in core/backend.py alone (it was written out six times before)."""
    copies = [str(p.relative_to(ROOT)) for folder in ("core", "backends") for p in (ROOT / folder).rglob("*.py")
              if "unknown option" in p.read_text(encoding="utf-8")]
    assert copies == ["core/backend.py"]
