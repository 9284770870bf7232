package main

import "github.com/spf13/cobra"

// addServerCommands registers agent and dev.
func addServerCommands(root *cobra.Command) {}
