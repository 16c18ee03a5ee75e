"""Storage: table locations, ownership markers, storage options, vended credentials, and the
files of a table on a local disk or an object store."""
