"""e2e/test's `cargo test` step (runner.py): the workspace's test binaries built once, then run
side by side on the shared stack, a few at a time, except those that disturb it for the others,
which run alone."""
