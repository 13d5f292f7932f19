"""The loop's nodes, and the helpers only they use.

Each node is one synchronous function ``(state, runtime, deps)`` in the module of its
name: `start`, `controller`, `tools`, `answerer`, `synthesis`, `ground`, `finish`.
Beside them, one module per concern the nodes share: `prompts` (the texts), `models`
(the model boundary), `deps` (the objects a run is built with), `conversation`,
`budget`, `policy`, `evidence`, `offline` (the controller that needs no model),
`common` and `lifecycle`. They stay flat in this folder, not in a subpackage: their
names already say which is a node, and an import reads ``arcana_loop.nodes.prompts``
as the templates' ``prompts.py`` does. Nodes import core, tools, grounding and
knowledge, never the graph that assembles them.
"""
