package main

import "github.com/urfave/cli/v2"

// runFUSE mounts the file service. Not built yet.
func runFUSE(c *cli.Context) error {
	return cli.Exit("mount: the FUSE file service is not implemented yet (see README.md)", 2)
}
