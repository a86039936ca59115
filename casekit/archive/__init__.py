"""The archive: a folder of case bundles (`store`), its derived index (`index`) and their cache key
(`cache`), and the git repository it may live in (`git`: history commits, provenance)."""
