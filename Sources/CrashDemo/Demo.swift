import CrashHarness
import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The crash-and-resume demo, the README's first command (`swift run crash-demo`).
///
/// It launches this same executable as the child "app" (``AppCommand``) on a fresh store,
/// follows the app's effects journal and prints it as a timeline, SIGKILLs the app while
/// uploads are in flight, relaunches it until it finishes, and prints each upload's progress
/// and the final tally (``DemoTally``). It exits with 0 only when nothing was lost and no
/// completed upload ran again.
struct DemoCommand {
    var options: DemoOptions

    /// The longest one launch may run before the demo gives up on it.
    static let launchTimeout: TimeInterval = 120

    /// Runs the demo and returns the process exit status.
    func run() throws -> Int32 {
        if options.showsHelp {
            say(DemoOptions.usage)
            return 0
        }
        let workspace = try Workspace(keeping: options.store)
        defer { workspace.removeIfTemporary() }
        let seed = options.seed ?? UInt64.random(in: 0...999_999)
        var random = SeededGenerator(seed: seed)

        say("""
            crash-demo: \(options.count) uploads and \(options.albums) albums, \(options.kills) SIGKILLs, seed \(seed) (repeat the kill moments with --seed \(seed))
            store: \(workspace.store.path)\(options.store == nil ? " (temporary; keep one with --store DIR)" : "")
            uploads cycle through: succeeds, flaky (2 counted retries with backoff), waits for network (2 uncounted retries), succeeds, flaky, refused (fails for good)\(options.albums == 0 ? "" : """

            each album is a graph: create (flaky) <- photos 1-3 (photo 2 waits for network; refused in every third album) <- publish;
              even albums are added with one addOperations call (all or none), odd ones with one addOperation per node
            """)

            """)
        var timeline = Timeline(print: say)
        let tail = JournalTail(path: workspace.journal)
        var kills = 0
        while true {
            let killAfterStarts = kills < options.kills ? Int.random(in: Self.killRange(count: options.count), using: &random) : nil
            let app = try launchApp(workspace)
            let wasKilled = try follow(app, tail: tail, timeline: &timeline, killAfterStarts: killAfterStarts)
            if wasKilled {
                kills += 1
                if options.stopsAfterKill && kills == options.kills {
                    return stopAfterKill(workspace)
                }
                continue
            }
            guard app.terminationReason == .exit, app.terminationStatus == 0 else {
                say("the app ended on its own with status \(app.terminationStatus); its error output:\n\(workspace.appErrors)")
                return 1
            }
            if let killAfterStarts, kills < options.kills {
                say("(the app finished before its planned kill after \(killAfterStarts) attempts)")
            }
            break
        }
        let tally = try DemoTally(journal: workspace.journal, store: workspace.store, count: options.count, albums: options.albums)
        say("")
        say(DemoReport(tally: tally, kills: kills).text)
        return tally.isSuccessful ? 0 : 1
    }

    /// Ends the demo after its last kill (`--stop-after-kill`), the unfinished uploads left
    /// pending in the kept store.
    private func stopAfterKill(_ workspace: Workspace) -> Int32 {
        let pending = (try? ReadOnlyPersistentStore(directory: workspace.store).pendingRecords().records.count) ?? 0
        say("""

            Stopped after the last SIGKILL, without relaunching the app: \(pending) \(pending == 1 ? "upload is" : "uploads are") pending in \(workspace.store.path).
            Inspect them:  swift run store-inspector list \(workspace.store.path)
            """)
        return 0
    }

    /// After how many attempt starts within one launch the app is killed: between a quarter
    /// and a half of the uploads, so that some work is done and some is in flight.
    static func killRange(count: Int) -> ClosedRange<Int> {
        max(2, count / 4)...max(2, count / 2)
    }

    /// Starts the app on the workspace's store; its error output goes to a file.
    private func launchApp(_ workspace: Workspace) throws -> Process {
        let process = Process()
        process.executableURL = try Self.executable()
        process.arguments = ["app", "--store", workspace.store.path, "--effects", workspace.journal,
                             "--count", "\(options.count)", "--albums", "\(options.albums)", "--attempt-ms", "\(options.attemptMilliseconds)"]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = try workspace.appErrorHandle()
        try process.run()
        return process
    }

    /// Prints the journal as the app writes it until the app exits, or kills it once it has
    /// started `killAfterStarts` attempts in this launch and one of them is still running.
    /// Returns whether it killed the app.
    private func follow(_ app: Process, tail: JournalTail, timeline: inout Timeline, killAfterStarts: Int?) throws -> Bool {
        let deadline = Date().addingTimeInterval(Self.launchTimeout)
        var starts = 0
        while true {
            let exited = !app.isRunning
            for event in tail.newEvents() {
                timeline.handle(event)
                if case .started = event { starts += 1 }
            }
            if exited {
                app.waitUntilExit()
                timeline.flushGroup()
                return false
            }
            if let killAfterStarts, starts >= killAfterStarts, !timeline.attemptsRunning.isEmpty {
                kill(app.processIdentifier, SIGKILL)
                app.waitUntilExit()
                for event in tail.newEvents() { timeline.handle(event) }
                timeline.flushGroup()
                let running = timeline.attemptsRunning.count
                say("*** SIGKILL app (pid \(app.processIdentifier)): \(running) \(running == 1 ? "attempt" : "attempts") running, \(timeline.unfinished.count) uploads not finished ***")
                return true
            }
            guard Date() < deadline else {
                kill(app.processIdentifier, SIGKILL)
                app.waitUntilExit()
                throw DemoError("the app did not finish within \(Int(Self.launchTimeout)) s")
            }
            usleep(2_000)
        }
    }

    /// This executable, to launch as the app.
    static func executable() throws -> URL {
        #if os(Linux)
        if let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            return URL(fileURLWithPath: path)
        }
        #endif
        if let url = Bundle.main.executableURL { return url }
        return URL(fileURLWithPath: CommandLine.arguments[0])
    }
}

/// Writes a line to standard output at once (no buffering), so the timeline appears live.
func say(_ text: String) {
    FileHandle.standardOutput.write(Data((text + "\n").utf8))
}
