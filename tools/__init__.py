"""The controller's tools: schemas, scoping, execution and chunk bookkeeping."""
