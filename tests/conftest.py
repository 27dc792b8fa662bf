# Real-database fixtures (PostgreSQL, MySQL/MariaDB, Redis, SQLite) live in tests/backends.py.
pytest_plugins = ["tests.backends"]
