"""Google's Model Explorer as a second viewer of IR files: an adapter extension and per-node data.

``pip install ai-edge-model-explorer`` (or this project's ``explorer`` extra), then::

    model-explorer model.ir.json --extensions=common.explorer

opens an IR file in Model Explorer: its adapter (:mod:`common.explorer.main`, found by Model Explorer as
``<extension module>.main``) reads the file as data (:meth:`common.ir.IR.load` for viewing: nothing of the model is
imported) and gives one graph in which every module call is expanded into the callee's own graph, placed in the
module's *layer* (Model Explorer's namespace, ``layers/3/self_attn``), so the module hierarchy is what Model
Explorer folds and unfolds. A module rebuilt by its handler (a ``Linear``, a ``Conv2d``) is one node named after
its class. Every node carries its IR name, module, op, arguments and recorded output (shape and dtype).

An overlay (``{module path or "path:node": number}``, as ``ir2torch view --overlay`` reads, e.g. ``ir2torch verify
--report``'s) becomes Model Explorer's per-node data with :func:`node_data`: a module's number on every node of its
layer, a node's on that node; load it in Model Explorer with *Add per-node data*, or in Python
``model_explorer.config().add_model_from_path(ir, adapterId=ADAPTER_ID).add_node_data_from_path(data)``.

:func:`explorer_graph` builds the graph as plain JSON (Model Explorer's graph format), needing no Model Explorer
package; only :mod:`common.explorer.main` imports it.
"""

from __future__ import annotations

from .graph import ADAPTER_ID, explorer_graph, node_data

__all__ = ["ADAPTER_ID", "explorer_graph", "node_data"]
