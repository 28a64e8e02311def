"""GPU descriptions as data: one TOML file per target, read by dsl_compiler.checks."""
