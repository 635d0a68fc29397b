"""Policy stage: read policy files (load), check them (validate, credentials) against the kinds
generated into JSON Schemas (kinds, schemas)."""
