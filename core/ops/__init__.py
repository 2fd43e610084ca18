"""Operator registry and the numpy reference implementation of every op."""

from __future__ import annotations

from .registry import OpContext, OpDef, get_op, lookup, register_op, registered_ops

__all__ = ["OpContext", "OpDef", "get_op", "lookup", "register_op", "registered_ops"]
