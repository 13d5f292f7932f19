"""The loop's nodes: one module per node, each a sync and an async body."""
