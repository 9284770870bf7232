// Package config holds the one Config struct of a raftlock agent: its defaults, its command-line
// flags, the RAFTLOCK_* environment variables and the optional config file that may set each
// flag, and validation with messages that name the offending setting.
//
// Precedence: a flag given on the command line, then the environment, then the config file,
// then the default. It imports nothing from the project.
package config
