import Foundation

/// The crash-and-resume demo (the README's first command). Being written: for now it
/// explains how to run the child app by hand.
struct DemoCommand {
    var arguments: [String]

    func run() throws {
        throw DemoError("the interactive demo driver is not built yet; run `crash-demo app --store DIR --effects FILE --count N`")
    }
}
