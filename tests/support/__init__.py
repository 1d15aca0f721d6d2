"""What the test groups (unit, integration, e2e) share, one module a topic; imported as
``support.<topic>`` (pytest puts tests/ on sys.path)."""
