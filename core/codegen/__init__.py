"""Code generation shared by every backend that emits source text.

``names`` is the only way a name taken from a model (graph, node, tensor)
reaches generated source: as a sanitized comment, a string literal, or a
generated identifier.  The kernel IR and its C-style renderer live here too.
"""
