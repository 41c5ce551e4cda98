import CrashHarness
import Foundation
import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The crash soak: launches the child `app` against one store again and again, SIGKILLs it at
/// a moment aimed at one phase of its work, then lets it finish and checks the at-least-once
/// contract over the whole journal (see ``SoakVerifier``).
///
///     crash-demo soak [--cycles N] [--count M] [--albums A] [--seed S] [--directory DIR]
///                     [--crasher-every K] [--killer-every K] [--sigterm-every K] [--grace-ms MS]
///                     [--crash-loop-limit L] [--attempt-ms MS]
///
/// Every cycle launches the app with `--count` raised by M and `--albums` by A, so each launch
/// adds A new albums (operation graphs, ``DemoAlbum``: batches and single adds) and M new uploads
/// (succeeding, counted and uncounted retrying, refused) on top of the backlog; every K-th
/// cycle also adds an upload that crashes its own process (`--crasher`, a trap), and every K-th
/// of `--killer-every` one that gets it SIGKILLed (`--killer`, as iOS kills an app for memory
/// or a hang). Every K-th cycle of `--sigterm-every` (not one that adds a poison) sends SIGTERM
/// instead of SIGKILL, as a deploy does: the app must shut down gracefully and exit 0 within its
/// grace period (`--grace-ms`) plus 1 s (for a SIGTERM during the restore, which finishes
/// first, counted from the restore's end). The store, the effects
/// journal and the apps' standard error stay in DIR (default: a new temporary directory,
/// deleted when every check passed). Exits 0 when every check passed, 1 otherwise.
struct SoakCommand {
    var cycles = 50
    var count = 6
    var albumsPerCycle = 1
    var seed = UInt64.random(in: 1...UInt64.max)
    var directory: URL?
    var crasherEvery = 25
    var killerEvery = 25
    var sigtermEvery = 4
    var graceMilliseconds = 500
    var crashLoopLimit = PersistentOperationQueue.Configuration.defaultCrashLoopLimit
    var attemptMilliseconds = 30

    /// Where in the app's work a kill is aimed.
    enum Phase: String, CaseIterable {
        /// 0–20 ms after launch: while the process starts and restores.
        case restore
        /// On the first `ack` of the launch: while uploads are being added.
        case adds
        /// 0–attempt ms after a `start`: while an attempt runs.
        case attempt
        /// 5–60 ms after a `retry`: while an operation waits for its next attempt.
        case retryWait = "retry-wait"
        /// On a `done`: while the finished operation's record is being removed.
        case removal
    }

    /// How one cycle ended.
    enum CycleEnd {
        case killed(Phase)
        /// The aimed-at moment did not come within the time limit; killed anyway.
        case killedLate(Phase)
        /// The app died by itself (a crasher's trap) before the kill.
        case diedByItself(signal: Int32)
        /// The app finished its work before the kill.
        case exited(status: Int32)
        /// The app got SIGTERM at the aimed-at moment (`reached`) and ended after `seconds`:
        /// exited with `status`, or (`bySignal`) died of that signal.
        case terminated(Phase, reached: Bool, seconds: Double, status: Int32, bySignal: Bool)
    }

    func run() throws -> Bool {
        let started = Date()
        let workDirectory = directory ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("crash-soak-\(UUID().uuidString)", isDirectory: true)
        try FileManager.default.createDirectory(at: workDirectory, withIntermediateDirectories: true)
        let store = workDirectory.appendingPathComponent("store", isDirectory: true)
        let effects = workDirectory.appendingPathComponent("effects.txt").path
        let errors = workDirectory.appendingPathComponent("app-stderr.txt").path
        _ = FileManager.default.createFile(atPath: errors, contents: nil)
        print("crash soak: \(cycles) cycles, \(count) new uploads and \(albumsPerCycle) new albums per cycle, a crasher every \(crasherEvery) cycles, a killer every \(killerEvery) cycles, crash-loop limit \(crashLoopLimit), seed \(seed)")
        print("  directory: \(workDirectory.path)")

        var random = SeededGenerator(seed: seed)
        var ends: [CycleEnd] = []
        var temporaryFilesAfterKills = 0
        var problems: [String] = []
        var crasherLaunches = 0
        var killerLaunches = 0
        // Crasher cycles whose app acknowledged the crasher: one that an earlier crasher crashed
        // first never adds it (the next cycle adds that index as an ordinary upload).
        var crashersAcknowledged = 0
        var killersAcknowledged = 0
        // For each SIGTERM, the seconds until the app's process had exited.
        var exitSeconds: [Double] = []
        for cycle in 0..<cycles {
            let addsCrasher = crasherEvery > 0 && cycle % crasherEvery == crasherEvery / 2
            let addsKiller = !addsCrasher && killerEvery > 0 && cycle % killerEvery == killerEvery - 1
            if addsCrasher { crasherLaunches += 1 }
            if addsKiller { killerLaunches += 1 }
            let randomPhase = Phase.allCases.randomElement(using: &random)!
            // A poison is added last: its cycle waits for its acknowledgement, then kills
            // during an attempt.
            let addsPoison = addsCrasher || addsKiller
            let terminates = !addsPoison && sigtermEvery > 0 && cycle % sigtermEvery == sigtermEvery / 2
            let phase = addsPoison ? .attempt : randomPhase
            let launchCount = (cycle + 1) * count
            let (end, sawPrerequisite) = try runCycle(
                arguments: appArguments(
                    store: store, effects: effects, count: launchCount, albums: (cycle + 1) * albumsPerCycle,
                    crasher: addsCrasher, killer: addsKiller
                ),
                effects: effects, errors: errors, phase: phase,
                after: addsPoison ? "ack \(launchCount) " : nil, terminates: terminates, exitSeconds: &exitSeconds, random: &random
            )
            if case .terminated(let phase, _, let seconds, let status, let bySignal) = end {
                let limit = Double(graceMilliseconds) / 1000 + 1
                if bySignal || status != 0 {
                    problems.append("cycle \(cycle): after SIGTERM during \(phase.rawValue) the app \(bySignal ? "died of signal" : "exited with status") \(status) (see \(errors))")
                }
                if seconds > limit {
                    problems.append("cycle \(cycle): after SIGTERM during \(phase.rawValue) the app took \(String(format: "%.2f", seconds)) s to shut down and exit (limit \(limit) s to shut down)")
                }
            }
            if case .exited(let status) = end, status != 0 {
                problems.append("cycle \(cycle): the app exited with status \(status) (see \(errors))")
            }
            if case .diedByItself(let signal) = end, signal != SIGKILL, !Self.isCrashersTrap(signal) {
                problems.append("cycle \(cycle): the app crashed with signal \(signal)")
            }
            if addsCrasher && sawPrerequisite { crashersAcknowledged += 1 }
            if addsKiller && sawPrerequisite { killersAcknowledged += 1 }
            ends.append(end)
            temporaryFilesAfterKills += temporaryFiles(in: store).count
        }

        // Then let it finish: each pending poison may still end up to `crashLoopLimit` + 1 launches.
        let finalCount = cycles * count
        let finalAlbums = cycles * albumsPerCycle
        var finalLaunches = 0
        var finalCrashes = 0
        var finalKills = 0
        var finished = false
        while !finished && finalLaunches <= (crasherLaunches + killerLaunches + 1) * (crashLoopLimit + 1) + 1 {
            finalLaunches += 1
            let app = try Self.launch(appArguments(store: store, effects: effects, count: finalCount, albums: finalAlbums, crasher: false), errors: errors)
            guard Self.waitForExit(app, timeout: 300) else {
                problems.append("the final launch did not finish within 300 s")
                break
            }
            if app.terminationReason == .exit {
                finished = true
                if app.terminationStatus != 0 { problems.append("the final launch exited with status \(app.terminationStatus) (see \(errors))") }
            } else if Self.isCrashersTrap(app.terminationStatus) {
                finalCrashes += 1
            } else if app.terminationStatus == SIGKILL {
                finalKills += 1   // a killer: nothing else kills the final launches
            } else {
                problems.append("a final launch crashed with signal \(app.terminationStatus)")
            }
        }
        if !finished { problems.append("the app never finished after \(finalLaunches) final launches") }

        var verifier = try SoakVerifier(effects: effects, store: store, count: finalCount, albums: finalAlbums)
        verifier.verify()
        problems += verifier.problems
        if verifier.tally.crashLoopedCrashers < crashersAcknowledged {
            problems.append("\(crashersAcknowledged) crashers were acknowledged, but only \(verifier.tally.crashLoopedCrashers) were caught by crash-loop protection")
        }
        if verifier.tally.crashLoopedKillers < killersAcknowledged {
            problems.append("\(killersAcknowledged) killers were acknowledged, but only \(verifier.tally.crashLoopedKillers) were caught by crash-loop protection")
        }

        let duration = Date().timeIntervalSince(started)
        var killsByPhase: [String: Int] = [:]
        var late = 0
        var diedByItself = 0
        var exitedEarly = 0
        var terminations: [Double] = []
        var terminationsByPhase: [String: Int] = [:]
        for end in ends {
            switch end {
            case .terminated(let phase, _, let seconds, _, _):
                terminations.append(seconds)
                terminationsByPhase[phase.rawValue, default: 0] += 1
            case .killed(let phase): killsByPhase[phase.rawValue, default: 0] += 1
            case .killedLate(let phase): killsByPhase[phase.rawValue, default: 0] += 1; late += 1
            case .diedByItself: diedByItself += 1
            case .exited: exitedEarly += 1
            }
        }
        let phases = Phase.allCases.map { "\($0.rawValue) \(killsByPhase[$0.rawValue, default: 0])" }.joined(separator: ", ")
        let tally = verifier.tally
        print("""
              cycles: \(cycles) (\(ends.count - diedByItself - exitedEarly - terminations.count) killed by the soak, \(terminations.count) sent SIGTERM, \(diedByItself) ended by a poison (a crasher or a killer), \(exitedEarly) finished before the kill)
              kills by phase: \(phases) (\(late) of them after the aimed-at moment did not come within 2 s)
              SIGTERMs by phase: \(Phase.allCases.map { "\($0.rawValue) \(terminationsByPhase[$0.rawValue, default: 0])" }.joined(separator: ", ")); shut down within \(String(format: "%.2f", terminations.max() ?? 0)) s at most (limit: the grace period \(graceMilliseconds) ms + 1 s, from the SIGTERM or, during a restore, from the restore's end), and exited 0 within \(String(format: "%.2f", exitSeconds.max() ?? 0)) s, \(tally.shutdownsStopped) attempts stopped by them as uncounted retries
              retries counted without a counted retry asked for: \(tally.unaskedRetries)
              launches: \(cycles + finalLaunches) (\(finalLaunches) after the last cycle, \(finalCrashes) of them crashed by a crasher, \(finalKills) killed by a killer; \(tally.launches) got as far as restoring); a crasher to add in \(crasherLaunches) cycles, acknowledged in \(crashersAcknowledged); a killer to add in \(killerLaunches) cycles, acknowledged in \(killersAcknowledged) (an app a poison ended first adds none)
              acknowledged: \(tally.acknowledged), completed: \(tally.completed), failed for good (refused): \(tally.refused)
              crash-loop protection moved aside: \(tally.crashLoopedCrashers) crashers (each after \(crashLoopLimit) crashes while it ran alone), \(tally.crashLoopedKillers) killers (each after \(crashLoopLimit) kills in a row while it ran alone), \(tally.crashLoopedOthers) other uploads
              launches that started each poison moved aside: crashers \(Self.describe(tally.launchesPerCrasher)), killers \(Self.describe(tally.launchesPerKiller))
              albums: \(finalAlbums) (\(tally.graphNodes) graph nodes): \(tally.graphNodesCompleted) completed, \(tally.graphNodesFailedWithPrerequisite) failed with a prerequisite, \(tally.graphNodesNotAdded) not added after a prerequisite failed
              dependents started before their prerequisites succeeded: \(tally.startsBeforePrerequisites); batches partly restored: \(tally.partlyRestoredBatches)
              lost: \(tally.lost), ran twice: \(tally.ranTwice) (each completed in a launch killed before its record was removed)
              temporary files: \(temporaryFilesAfterKills) found after kills (removed at the next open), \(tally.temporaryFilesAtEnd) at the end
              quarantined at any launch: \(tally.quarantined); pending at the end: \(tally.pendingAtEnd); store reopens read-write: \(tally.reopens ? "yes" : "no")
              duration: \(String(format: "%.1f", duration)) s
            """)
        if problems.isEmpty {
            print("crash soak: PASS")
            if directory == nil { try? FileManager.default.removeItem(at: workDirectory) }
            return true
        }
        print("crash soak: FAIL (\(problems.count) problems; the store and journal are kept in \(workDirectory.path))")
        for problem in problems.prefix(50) { print("  - \(problem)") }
        return false
    }

    /// `[3, 4, 4] (min 3, max 4)`, or `none`.
    static func describe(_ launches: [Int]) -> String {
        guard let minimum = launches.min(), let maximum = launches.max() else { return "none" }
        return "\(launches) (min \(minimum), max \(maximum))"
    }

    private func appArguments(store: URL, effects: String, count: Int, albums: Int, crasher: Bool, killer: Bool = false) -> [String] {
        var arguments = [
            "app", "--store", store.path, "--effects", effects, "--count", "\(count)", "--albums", "\(albums)",
            "--crash-loop-limit", "\(crashLoopLimit)", "--attempt-ms", "\(attemptMilliseconds)",
        ]
        if crasher { arguments.append("--crasher") }
        if killer { arguments.append("--killer") }
        return arguments
    }

    /// Launches the app, waits for the moment `phase` aims at, and kills it (or, when
    /// `terminates`, sends it SIGTERM and waits for it to exit).
    private func runCycle(
        arguments: [String], effects: String, errors: String, phase: Phase, after prerequisite: String?, terminates: Bool,
        exitSeconds: inout [Double], random: inout SeededGenerator
    ) throws -> (end: CycleEnd, sawPrerequisite: Bool) {
        let tail = SoakJournalTail(path: effects)
        let app = try Self.launch(arguments + ["--grace-ms", "\(graceMilliseconds)"], errors: errors)
        // Restoring a large backlog takes a while: the other phases come after it. A SIGTERM
        // waits until the app handles it: its `signals` line comes before the restore, so only
        // a SIGTERM aimed at the restore waits for it (one wait, since a wait consumes every
        // line it read: a `launch` read with `signals` would be missed by the next).
        let prerequisites = phase == .restore ? (terminates ? ["signals "] : []) : ["launch "] + (prerequisite.map { [$0] } ?? [])
        var sawPrerequisite = true
        for line in prerequisites {
            sawPrerequisite = tail.waitForLine(startingWith: line, while: app, until: Date().addingTimeInterval(60)) && sawPrerequisite
        }
        let deadline = Date().addingTimeInterval(2)
        var reached = false
        switch phase {
        case .restore:
            usleep(UInt32.random(in: 0...20_000, using: &random))
            reached = true
        case .adds:
            reached = tail.waitForLine(startingWith: "ack ", while: app, until: deadline)
        case .attempt:
            reached = tail.waitForLine(startingWith: "start ", while: app, until: deadline)
            if reached { usleep(UInt32.random(in: 0...UInt32(attemptMilliseconds * 1_000), using: &random)) }
        case .retryWait:
            reached = tail.waitForLine(startingWith: "retry ", while: app, until: deadline)
            if reached { usleep(UInt32.random(in: 5_000...60_000, using: &random)) }
        case .removal:
            reached = tail.waitForLine(startingWith: "done ", while: app, until: deadline)
        }
        if terminates, app.isRunning {
            tail.poll()
            let restoreEnded = tail.lines.contains { $0.hasPrefix("launch ") }
            var clockStart = Date()
            kill(app.processIdentifier, SIGTERM)
            if !restoreEnded {
                // A SIGTERM during the restore lets the restore finish first (it cannot stop
                // halfway): the grace period counts from its end, when the app journals `launch`.
                if tail.waitForLine(startingWith: "launch ", while: app, until: Date().addingTimeInterval(300)) { clockStart = Date() }
            }
            // The queue has shut down once the app journals `shutdown` (what is left is
            // `exit(0)`, which a sanitizer's teardown can make slow): the grace period's limit
            // applies to that moment; the exit itself is waited for, longer.
            // (The wait for `launch` may have read it already, and an app that exits at once
            // ends the wait before it is read: the app journals it once, so every line read
            // counts.)
            func journaledShutdown() -> Bool {
                tail.poll()
                return tail.lines.contains { $0.hasPrefix("shutdown ") }
            }
            let shutDown = journaledShutdown()
                || tail.waitForLine(startingWith: "shutdown ", while: app, until: Date().addingTimeInterval(Double(graceMilliseconds) / 1000 + 10))
                || journaledShutdown()
            let seconds = shutDown ? Date().timeIntervalSince(clockStart) : .infinity
            let exited = Self.waitForExit(app, timeout: 10)
            exitSeconds.append(Date().timeIntervalSince(clockStart))
            if exited, app.terminationReason != .exit, Self.isCrashersTrap(app.terminationStatus) || app.terminationStatus == SIGKILL {
                // A poison upload (a crasher's trap, a killer's SIGKILL) ended the app first.
                return (.diedByItself(signal: app.terminationStatus), sawPrerequisite)
            }
            return (.terminated(phase, reached: reached, seconds: exited ? seconds : .infinity,
                                status: app.terminationStatus, bySignal: app.terminationReason != .exit), sawPrerequisite)
        }
        // The kill is the soak's when the app still ran; otherwise it exited, or the crasher
        // killed it (a crasher's kill in the instant before ours is counted as ours).
        let sentKill = app.isRunning
        if sentKill {
            kill(app.processIdentifier, SIGKILL)
        }
        app.waitUntilExit()
        if app.terminationReason == .exit {
            return (.exited(status: app.terminationStatus), sawPrerequisite)
        }
        if !sentKill || app.terminationStatus != SIGKILL {
            return (.diedByItself(signal: app.terminationStatus), sawPrerequisite)
        }
        return (reached ? .killed(phase) : .killedLate(phase), sawPrerequisite)
    }

    /// Launches this executable with `arguments`, its standard error appended to `errors`.
    static func launch(_ arguments: [String], errors: String) throws -> Process {
        let process = Process()
        process.executableURL = Self.executable
        process.arguments = arguments
        // A crasher's crash ends the app at once. With the Swift runtime's backtracer on, a
        // crash starts a helper process that inherits the app's descriptors; a soak kill that
        // lands while it runs can orphan it, and Foundation's `Process` then never sees the
        // app end.
        process.environment = ProcessInfo.processInfo.environment.merging(["SWIFT_BACKTRACE": ProcessInfo.processInfo.environment["CRASH_DEMO_APP_BACKTRACE"] ?? "enable=no"]) { $1 }
        process.standardOutput = FileHandle.nullDevice
        let errorHandle = FileHandle(forWritingAtPath: errors)
        errorHandle?.seekToEndOfFile()
        process.standardError = errorHandle ?? FileHandle.nullDevice
        try process.run()
        return process
    }

    /// Whether an app that died of `signal` died of a crasher's trap (`fatalError`: SIGILL on
    /// x86-64, SIGTRAP on arm64), which crash-loop protection catches.
    static func isCrashersTrap(_ signal: Int32) -> Bool {
        signal == SIGILL || signal == SIGTRAP
    }

    /// Waits up to `timeout` seconds for `process` to exit; kills it and returns false if it does not.
    static func waitForExit(_ process: Process, timeout: TimeInterval) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning {
            if Date() > deadline {
                kill(process.processIdentifier, SIGKILL)
                process.waitUntilExit()
                return false
            }
            usleep(2_000)
        }
        process.waitUntilExit()
        return true
    }

    private func temporaryFiles(in store: URL) -> [String] {
        var names: [String] = []
        for area in ["pending", "failed", "quarantine", "attempts"] {
            let entries = (try? FileManager.default.contentsOfDirectory(atPath: store.appendingPathComponent(area).path)) ?? []
            names += entries.filter { $0.hasPrefix(".") && $0.hasSuffix(".tmp") }.map { area + "/" + $0 }
        }
        return names
    }

    /// This executable, to launch as the child app.
    static var executable: URL {
        if let path = Bundle.main.executablePath { return URL(fileURLWithPath: path) }
        return URL(fileURLWithPath: CommandLine.arguments[0])
    }
}

/// Reads the lines appended to the effects journal since it was created.
final class SoakJournalTail {
    private let path: String
    private var offset: UInt64
    private var pending = ""
    private(set) var lines: [String] = []
    /// The lines already looked at by a wait.
    private var checked = 0

    init(path: String) {
        self.path = path
        let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.uint64Value ?? 0
        offset = size
    }

    /// Reads what was appended since the last call.
    func poll() {
        guard let handle = FileHandle(forReadingAtPath: path) else { return }
        defer { try? handle.close() }
        handle.seek(toFileOffset: offset)
        let data = handle.readDataToEndOfFile()
        offset += UInt64(data.count)
        pending += String(decoding: data, as: UTF8.self)
        while let newline = pending.firstIndex(of: "\n") {
            lines.append(String(pending[..<newline]))
            pending = String(pending[pending.index(after: newline)...])
        }
    }

    /// Waits until a new line starts with `prefix` while `process` runs; false on timeout or exit.
    func waitForLine(startingWith prefix: String, while process: Process, until deadline: Date) -> Bool {
        waitForLine(where: { $0.hasPrefix(prefix) }, while: process, until: deadline)
    }

    /// Waits until a new line satisfies `isWanted` while `process` runs; false on timeout or exit.
    func waitForLine(where isWanted: (String) -> Bool, while process: Process, until deadline: Date) -> Bool {
        while process.isRunning, Date() < deadline {
            poll()
            if lines[checked...].contains(where: isWanted) {
                checked = lines.count
                return true
            }
            checked = lines.count
            usleep(300)
        }
        return false
    }
}

extension SoakCommand {
    static let usage = "usage: crash-demo soak [--cycles N] [--count M] [--albums A] [--seed S] [--directory DIR] [--crasher-every K] [--killer-every K] [--sigterm-every K] [--grace-ms MS] [--crash-loop-limit L] [--attempt-ms MS]"

    /// Reads the options of `crash-demo soak`.
    init(arguments: [String]) {
        func number(_ name: String) -> Int? {
            guard let text = option(name, in: arguments) else { return nil }
            guard let value = Int(text), value >= 0 else { fail("\(name) needs a whole number\n\(Self.usage)") }
            return value
        }
        if let cycles = number("--cycles") { self.cycles = cycles }
        if let count = number("--count") { self.count = count }
        if let albums = number("--albums") { albumsPerCycle = albums }
        if let seed = option("--seed", in: arguments) {
            guard let value = UInt64(seed) else { fail("--seed needs a whole number\n\(Self.usage)") }
            self.seed = value
        }
        if let directory = option("--directory", in: arguments) { self.directory = URL(fileURLWithPath: directory) }
        if let every = number("--crasher-every") { crasherEvery = every }
        if let every = number("--killer-every") { killerEvery = every }
        if let every = number("--sigterm-every") { sigtermEvery = every }
        if let milliseconds = number("--grace-ms") { graceMilliseconds = milliseconds }
        if let limit = number("--crash-loop-limit") { crashLoopLimit = limit }
        if let milliseconds = number("--attempt-ms") { attemptMilliseconds = milliseconds }
    }
}
