"""Table versions: the operations, the manifests under ``_versions/``, the versions the catalog
manages, and what a managed table refuses."""
