"""The storage protocol and everything behind it.

Azure, SQLite and in-memory stores, metering, payload stores and connection strings.
"""
