"""The catalog half: warehouses and their pyiceberg REST clients, companion tables, namespaces,
listing, and what this process last knew of managed tables. It speaks pyiceberg only."""
