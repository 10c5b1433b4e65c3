"""The sweep history: archiving a sweep's runs (archive.py), reading them with DuckDB (query.py,
through the one `--where` evaluator sqlfilter.py), the sides of a comparison (sides.py) and the
comparison itself (compare.py). The last layer before the top-level pipeline and command line."""
