import Foundation

/// The command-line options of the crash-and-resume demo (`crash-demo` without a subcommand).
///
///     crash-demo [--count N] [--albums A] [--kills K] [--store DIR [--stop-after-kill]] [--seed S] [--attempt-ms MS]
struct DemoOptions {
    /// How many uploads the app adds. Default: 20.
    var count = 20
    /// How many albums (small operation graphs, ``DemoAlbum``) the app adds. Default: 3.
    var albums = 3
    /// How many times the app is killed with SIGKILL before it may run to the end. Default: 2.
    var kills = 2
    /// Where the store is kept after the demo; `nil` uses a temporary directory that is
    /// deleted at the end.
    var store: URL?
    /// The seed that chooses the kill moments; `nil` picks one (and prints it).
    var seed: UInt64?
    /// Milliseconds one upload attempt takes. Default: 60, slow enough to kill work in flight.
    var attemptMilliseconds = 60
    /// Stop after the last SIGKILL instead of relaunching the app, leaving the unfinished
    /// uploads pending in the kept store (for `store-inspector`). Needs `--store`.
    var stopsAfterKill = false
    /// Whether `--help` was asked for.
    var showsHelp = false

    static let usage = """
        usage: crash-demo [--count N] [--albums A] [--kills K] [--store DIR [--stop-after-kill]] [--seed S] [--attempt-ms MS]

        Runs an app that adds N persistent uploads to a store, SIGKILLs it K times while
        uploads are in flight, relaunches it until it finishes, and checks from the app's
        effects journal and the store that no acknowledged upload was lost and none ran
        again after it completed. Exits with 0 only then.

          --count N       uploads to add (default 20); every sixth is refused for good
          --albums A      albums to add (default 3): create <- 3 photos <- publish, each
                          dependent started only after its prerequisites succeeded; even
                          albums in one addOperations batch, odd ones node by node
          --kills K       SIGKILLs before the app may finish (default 2)
          --store DIR     keep the store (and its effects.txt journal) in DIR, which must be
                          empty or absent; by default a temporary directory is used and deleted
          --stop-after-kill
                          stop after the last SIGKILL without relaunching the app: the
                          uploads it left unfinished stay pending in the --store DIR, for
                          store-inspector (needs --store and --kills of at least 1)
          --seed S        seed for the kill moments (default: random, printed)
          --attempt-ms MS how long one upload attempt takes (default 60)
          --help          show this text

        Other subcommands (used by the demo and the tests):
          crash-demo app --store DIR --effects FILE --count N [--albums A] [--crash-loop-limit K] [--crasher | --killer] [--attempt-ms MS] [--max-concurrent W] [--inactive]
          crash-demo hold --store DIR
          crash-demo lanes-soak [--cycles N] [--count M] [--lanes L] [--seed S] [--directory DIR] [--attempt-ms MS] [--expires-ms MS]
                          kills a chat-outbox app whose conversations are ordered lanes,
                          relaunches it, and checks each lane ran one message at a time, in order
          crash-demo lanes-app --store DIR --effects FILE --count N [--lanes L] [--attempt-ms MS] [--expires-ms MS] [--crash-loop-limit K] [--adds-before-restore]
          crash-demo inbox-producer --store DIR --effects FILE --producer NAME --messages N [--pause-ms MS]
                          adds N messages through the store's inbox, as an app extension
                          would, in the lane NAME, going on after the last one acknowledged
          crash-demo inbox-owner --store DIR --effects FILE [--until-idle]
                          holds the store and takes the inbox's messages in as they arrive;
                          runs until killed, or until nothing is pending or waiting
        """

    /// Parses `arguments` (without the program name).
    ///
    /// - Throws: ``DemoError`` naming the option that is unknown or lacks a valid value.
    init(arguments: [String]) throws {
        var remaining = arguments[...]
        while let name = remaining.popFirst() {
            func value() throws -> String {
                guard let value = remaining.popFirst() else { throw DemoError("\(name) needs a value\n\n\(Self.usage)") }
                return value
            }
            func number<Number: FixedWidthInteger>(_: Number.Type, atLeast minimum: Number) throws -> Number {
                let text = try value()
                guard let number = Number(text), number >= minimum else {
                    throw DemoError("\(name) needs a whole number of at least \(minimum), not \"\(text)\"")
                }
                return number
            }
            switch name {
            case "--count": count = try number(Int.self, atLeast: 1)
            case "--albums": albums = try number(Int.self, atLeast: 0)
            case "--kills": kills = try number(Int.self, atLeast: 0)
            case "--store": store = URL(fileURLWithPath: try value(), isDirectory: true)
            case "--seed": seed = try number(UInt64.self, atLeast: 0)
            case "--attempt-ms": attemptMilliseconds = try number(Int.self, atLeast: 1)
            case "--stop-after-kill": stopsAfterKill = true
            case "--help", "-h": showsHelp = true
            default: throw DemoError("unknown option \"\(name)\"\n\n\(Self.usage)")
            }
        }
        if stopsAfterKill && (store == nil || kills < 1) {
            throw DemoError("--stop-after-kill needs --store DIR (to keep the store) and --kills of at least 1\n\n\(Self.usage)")
        }
    }
}
