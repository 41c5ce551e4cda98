import Foundation

/// The command line of `retrying-benchmarks`.
struct Options: Sendable {
    static let usage = """
        usage: retrying-benchmarks [--smoke] [--only IDS] [--json PATH] [--list]

          --smoke       small sizes and short waits (CI keeps the suite working with it);
                        figures are not comparable with a full run's
          --only IDS    run only these benchmarks, comma-separated, such as P1,P2
          --json PATH   also write the results to PATH as JSON
          --list        list the benchmarks and exit
          --help        show this help

        Build in release mode: swift run -c release --package-path Benchmarks retrying-benchmarks
        """

    var mode = RunMode.full
    var only: Set<String>?
    var jsonPath: String?
    var listsBenchmarks = false
    var showsHelp = false

    /// Parses `arguments` (without the program name).
    init(arguments: [String]) throws {
        var remaining = arguments[...]
        while let argument = remaining.popFirst() {
            switch argument {
            case "--smoke":
                mode = .smoke
            case "--only":
                guard let list = remaining.popFirst() else { throw OptionsError("--only needs a list of ids, such as P1,P2") }
                let ids = list.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).uppercased() }
                only = Set(ids.filter { !$0.isEmpty })
            case "--json":
                guard let path = remaining.popFirst() else { throw OptionsError("--json needs a file path") }
                jsonPath = path
            case "--list":
                listsBenchmarks = true
            case "--help", "-h":
                showsHelp = true
            default:
                throw OptionsError("unknown argument '\(argument)'")
            }
        }
    }
}

/// A command line that cannot be run.
struct OptionsError: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}
