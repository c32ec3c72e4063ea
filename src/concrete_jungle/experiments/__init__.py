"""Experiments on the rendered toy world: `stages` (the shared, cached stages and rows), `report` (tables and
figures), `demo` (`concrete-jungle demo`) and `study` (`concrete-jungle demo --study`, pre-registered)."""
