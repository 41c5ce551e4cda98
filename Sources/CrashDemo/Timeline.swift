import CrashHarness
import Foundation

/// Turns the app's journal events into the demo's readable timeline as they arrive, and keeps
/// what is needed to describe the moment of a kill.
///
///     [launch 1] added uploads 0-19 (each durable before addOperation returned)
///     [launch 1] upload  1  attempt 1
///     [launch 1] upload  1  503 server busy -> retry with backoff (counted: 1)
///     *** SIGKILL app (pid 4242): 4 attempts running, 15 uploads not finished ***
///     [launch 2] app started (pid 4250): restored 15 pending uploads from the store
struct Timeline {
    /// The launch the events belong to, counting from 1.
    private(set) var launch = 0
    /// Uploads whose attempt started in this launch and has not ended.
    private(set) var attemptsRunning = Set<Int>()
    /// Uploads added or restored and not yet done or failed.
    private(set) var unfinished = Set<Int>()
    /// The launch in which each upload last completed.
    private var completedInLaunch: [Int: Int] = [:]
    /// Uploads restored in this launch that have not started again yet.
    private var restoredNotStarted = Set<Int>()
    /// Consecutive `ack` or `restored` lines, printed as one line.
    private var group: (verb: String, indices: [Int])?
    /// Upload index by record identifier, from `ack` and `restored` lines.
    private var indexByID: [String: Int] = [:]
    /// The prerequisites of graph nodes, and the batch each was added in, from `add` lines.
    private var prerequisites: [Int: [Int]] = [:]
    private var batchOf: [Int: String] = [:]
    private var announcedBatches = Set<String>()
    private var hasExplainedAdds = false
    private let print: (String) -> Void

    /// Creates a timeline that prints each line with `print`.
    init(print: @escaping (String) -> Void) {
        self.print = print
    }

    /// Prints what `event` means, updating the state.
    mutating func handle(_ event: JournalEvent) {
        switch event {
        case .adding(let index, let after, let batch):
            prerequisites[index] = after
            if let batch { batchOf[index] = batch }
            return
        case .failedArea:
            return
        case .acknowledged(let index, let id, _):
            indexByID[id] = index
            unfinished.insert(index)
            if let batch = batchOf[index], let album = AlbumGraph.node(of: index)?.album {
                // The whole batch was stored by one call: said once, at its first `ack`.
                guard announcedBatches.insert(batch).inserted else { return }
                flushGroup()
                say("added album \(album) (create <- photos 1-3 <- publish) with one addOperations call: stored all or none")
                return
            }
            add(index, to: "added")
            indexByID[id] = index
            unfinished.insert(index)
            return
        case .restored(let index, let id):
            add(index, to: "restored")
            indexByID[id] = index
            unfinished.insert(index)
            restoredNotStarted.insert(index)
            return
        default:
            flushGroup()
        }
        switch event {
        case .launch(let pid, let restored, let quarantined, let failedAfterCrashes):
            launch += 1
            attemptsRunning = []
            restoredNotStarted = []
            var line = "app started (pid \(pid))"
            line += restored == 0 && launch == 1 ? ": the store is empty" : ": \(restored) pending uploads in the store"
            if quarantined > 0 { line += ", \(quarantined) bad files quarantined" }
            if failedAfterCrashes > 0 { line += ", \(failedAfterCrashes) moved to failed after repeated crashes" }
            say(line)
        case .started(let index, let attempt, let retries):
            attemptsRunning.insert(index)
            var line = "attempt \(attempt)"
            if retries > 0 { line += " (\(retries) counted \(retries == 1 ? "retry" : "retries") so far)" }
            if restoredNotStarted.remove(index) != nil, attempt > 1 { line += ", resumed from the store" }
            if attempt == 1, let after = prerequisites[index], !after.isEmpty {
                line += " (after \(Self.names(after)) succeeded)"
            }
            say(upload(index) + line)
        case .retry(let index, let counted):
            attemptsRunning.remove(index)
            say(upload(index) + (counted ? "503 server busy -> retry with backoff (counted)" : "waiting for network -> retry when it is back (not counted)"))
        case .done(let index):
            attemptsRunning.remove(index)
            unfinished.remove(index)
            var line = "done"
            if let earlier = completedInLaunch[index], earlier < launch {
                line += " (again: it had completed in launch \(earlier), but the kill came before its record was removed)"
            }
            completedInLaunch[index] = launch
            say(upload(index) + line)
        case .failed(let index):
            attemptsRunning.remove(index)
            unfinished.remove(index)
            say(upload(index) + "403 upload refused -> fails for good")
        case .movedToFailed(let id):
            if let index = indexByID[id] { say(upload(index) + "moved to the failed area") }
        case .abandoned(let id, let prerequisite):
            if let index = indexByID[id] {
                attemptsRunning.remove(index)
                unfinished.remove(index)
                let cause = indexByID[prerequisite].map(AlbumGraph.name(of:)) ?? "operation \(prerequisite)"
                say(upload(index) + "fails without running: its prerequisite \(cause) failed for good")
            }
        case .skipped(let index, let after):
            say(upload(index) + "not added: its prerequisite \(Self.names(after)) failed for good")
        case .finished:
            say("every upload finished; the app exits")
        case .terminating:
            say("SIGTERM: the app shuts down gracefully")
        case .shutDown(let stopped, _):
            say("shut down (\(stopped) attempts stopped as uncounted retries); the app exits 0")
        case .handlesSignals:
            break
        case .unknown(let line):
            say("(journal) \(line)")
        case .removed, .acknowledged, .restored, .adding, .failedArea:
            break
        }
    }

    /// Prints any grouped lines still held back.
    mutating func flushGroup() {
        guard let group else { return }
        self.group = nil
        var what = ""
        if group.verb == "added", !hasExplainedAdds {
            what = " (each one durable on disk before addOperation returned)"
            hasExplainedAdds = true
        }
        say("\(group.verb) \(Self.names(group.indices))\(what)")
    }

    private mutating func add(_ index: Int, to verb: String) {
        if group?.verb != verb { flushGroup() }
        group = (verb, (group?.indices ?? []) + [index])
    }

    private func say(_ text: String) {
        print("[launch \(launch)] \(text)")
    }

    private func upload(_ index: Int) -> String {
        AlbumGraph.node(of: index) == nil ? "upload \(String(index).leftPadded(to: 2))  " : AlbumGraph.name(of: index) + "  "
    }

    /// "uploads 0-3, 5; album 1 create, photo 2" for a mix of uploads and graph nodes.
    static func names(_ indices: [Int]) -> String {
        let uploads = indices.filter { AlbumGraph.node(of: $0) == nil }
        var parts: [String] = []
        if !uploads.isEmpty { parts.append("\(uploads.count == 1 ? "upload" : "uploads") \(ranges(uploads))") }
        let nodes = indices.sorted().compactMap(AlbumGraph.node(of:))
        for album in Set(nodes.map(\.album)).sorted() {
            let roles = nodes.filter { $0.album == album }.map { AlbumGraph.roleName($0.role) }
            parts.append(roles.count == AlbumGraph.roles.count ? "album \(album)" : "album \(album) \(roles.joined(separator: ", "))")
        }
        return parts.joined(separator: "; ")
    }

    /// "0-3, 5, 7-9" for [0, 1, 2, 3, 5, 7, 8, 9].
    static func ranges(_ indices: [Int]) -> String {
        var parts: [String] = []
        var start: Int?
        var previous: Int?
        for index in indices.sorted() + [Int.max] {
            if let previous, index == previous + 1 {
                // Continues the run.
            } else if let first = start, let last = previous {
                parts.append(first == last ? "\(first)" : "\(first)-\(last)")
                start = index
            } else {
                start = index
            }
            previous = index
        }
        return parts.joined(separator: ", ")
    }
}

extension String {
    /// The string with spaces in front up to `width` characters.
    func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: " ", count: width - count) + self
    }

    /// The string with spaces after it up to `width` characters.
    func rightPadded(to width: Int) -> String {
        count >= width ? self : self + String(repeating: " ", count: width - count)
    }
}
