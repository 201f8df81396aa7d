import KeysmithCommandLine
import KeysmithSystem

// `keysmith-net`: the `keysmith` command with PostgreSQL and providers. The lean `keysmith` runs
// it in its own place for every command that needs them (NetworkHelper); it runs every command.
// SIGINT, SIGTERM and SIGHUP are held from a refresh's request to its commit (SignalShield): a
// signal there would lose the rotated refresh token the provider has already issued.
SignalShield.enable()
KeysmithCommand.main(network: .live)
