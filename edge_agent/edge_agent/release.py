"""The agent's release: the installed wheel's version (edge_agent/pyproject.toml).

A roll-out tells releases apart by it (the metrics' edge_agent_build_info, each record's
`pikit-agent` header), so it comes from the package metadata, never from a second copy.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    VERSION = version("pikit-edge-agent")
except PackageNotFoundError:  # a source tree that was never installed
    VERSION = "0+unknown"
