"""What a ConcreteBatch holds, measured: Table 1's statistics and Fig. 6's gradient share (`statistics`), their
plots (`figures`), and the gallery page of anchors and negatives (`gallery`)."""
