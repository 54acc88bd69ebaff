"""The test suite, a package: shared pieces in tests/support/, no test module imports another (CONTRIBUTING.md)."""
