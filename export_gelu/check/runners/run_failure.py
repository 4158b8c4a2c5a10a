"""A deployed graph that fails to run on a feed (ONNX Runtime's "Non-zero status code
returned while running Reshape node"): a verdict, not a crash. The graph was written and
cannot compute the model's outputs at those inputs, so parity fails (exit 1) naming the op,
the node and ONNX Runtime's own reason; the caller adds which sizes the feed had.
"""

from __future__ import annotations

import re

_NODE = re.compile(r"while running (\w+) node\. Name:'([^']*)'(?: Status Message: (.*))?", re.S)
#: the C++ source location and the check's code ONNX Runtime puts before its words
_SOURCE = re.compile(r"^\S+\.(?:h|cc|cpp):\d+ [^\n]*?\) ")


def deployed_run_failure(exc: BaseException) -> str | None:
    """Why the deployed graph could not run, in one line, when `exc` is ONNX Runtime failing
    on a node; None for anything else (it is not a verdict on the graph)."""
    text = str(exc)
    if "ONNXRuntimeError" not in text:
        return None
    found = _NODE.search(text)
    if found is None:
        first = " ".join(text.split())[:300]
        return f"onnxruntime could not run the graph ({first})"
    op, node, message = found[1], found[2], " ".join((found[3] or "").split())
    message = _SOURCE.sub("", message)
    tail = message.rsplit(" was false. ", 1)[-1] if " was false. " in message else message
    return f"onnxruntime could not run the graph: {op} node {node!r} failed ({tail[:300]})"
