"""Fuzz targets shared by the property-based tests and the coverage-guided fuzzer."""
