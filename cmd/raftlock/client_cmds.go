package main

import "github.com/spf13/cobra"

// addClientCommands registers the client-side commands (lock, elect, inspection).
func addClientCommands(root *cobra.Command) {}
