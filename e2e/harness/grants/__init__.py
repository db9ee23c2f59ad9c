"""e2e/grants-probe's rules (grants.py): the privileges the engine recorded against the GRANTs
docs/install.md states."""
