"""The evaluation harness: labelled cases, retrieval and loop evaluation, reports and their diffs."""
