import KeysmithCommandLine

// The lean `keysmith`: every command but those that need PostgreSQL or a provider, which it hands
// to `keysmith-net`, installed beside it (NetworkHelper).
KeysmithCommand.main(network: nil)
