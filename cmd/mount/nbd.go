package main

import "github.com/urfave/cli/v2"

// runNBD exports a block namespace over NBD. Not built yet.
func runNBD(c *cli.Context) error {
	return cli.Exit("mount: the NBD bridge is not implemented yet (see README.md)", 2)
}
