import KeysmithCommandLine

// `keysmith-net`: the `keysmith` command with PostgreSQL and providers. The lean `keysmith` runs
// it in its own place for every command that needs them (NetworkHelper); it runs every command.
KeysmithCommand.main(network: .live)
