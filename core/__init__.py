"""The loop's vocabulary: what tools, grounding, nodes and the graph all speak.

State and its channels, the run's options (`LoopContext`), text checks, the one bridge
from sync code to coroutines, cited sources and streamed token usage. Core imports only
`knowledge` and libraries, so every layer above can import it and none imports another
both ways.
"""
