"""The developers' tooling of the pikit repository: the lab of podman containers that stand in for
Pis, make's pipelines (`make test`, `make demo`), the demo, and the role READMEs' tables. The
operator's CLI and the controller's tools are the `pikit` package, which never imports this one."""
