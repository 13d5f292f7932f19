"""The ``arcana-loop`` command line."""
