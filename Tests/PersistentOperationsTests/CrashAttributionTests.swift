import Foundation
import Testing
@testable import PersistentOperations

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Crash-loop protection blames only the operation that crashes: launches simulated
/// in-process (a queue closed as if its process died; a crash is the line the crash-signal
/// handler writes, appended to the launch file). The real handler and real crashes are in
/// `CrashAttributionChildProcessTests`.
@Suite("Crash-loop protection: attribution", .timeLimit(.minutes(1)))
struct CrashAttributionTests {
    /// Waits (politely, and at most 20 s) for `condition`.
    func waitUntil(_ condition: () -> Bool) async throws {
        let deadline = Date().addingTimeInterval(20)
        while !condition() {
            guard Date() < deadline else { throw CancellationError() }
            try await Task.sleep(nanoseconds: 1_000_000)
        }
    }

    func relaunch(_ fixture: QueueFixture, maxConcurrent: Int = 4, crashSignal: Int32?, witness: Bool = true) throws -> QueueFixture {
        fixture.queue.close()
        if let crashSignal { try fixture.directory.noteCrash(signal: crashSignal) }
        return try QueueFixture(maxConcurrent: maxConcurrent, directory: fixture.directory, journal: fixture.journal, witness: witness)
    }

    /// The `started`, `succeeded` and `runningAlone` events, by operation name.
    func timeline(_ fixture: QueueFixture, names: [PersistentOperationID: String]) -> [String] {
        fixture.deliveredEvents().compactMap { event in
            switch event {
            case .runningAlone(let id, let crashes): return "alone \(names[id] ?? "?") crashes=\(crashes)"
            case .started(let id, _): return "start \(names[id] ?? "?")"
            case .succeeded(let id): return "done \(names[id] ?? "?")"
            default: return nil
            }
        }
    }

    @Test func afterACrashWithSeveralInFlightEachRunsItsNextAttemptAloneThenTheRestRuns() async throws {
        // Given four operations in flight on a 4-slot queue when the process crashes
        let first = try QueueFixture(maxConcurrent: 4)
        var names: [PersistentOperationID: String] = [:]
        for name in ["a", "b", "c", "d"] {
            names[try first.queue.addOperation(first.upload(name, [.hang, .succeed]), options: EnqueueOptions()).id] = name
        }
        try await waitUntil { !(first.lines.count < 4) }
        // When the next launch adds two more before restoring
        let second = try relaunch(first, crashSignal: SIGSEGV)
        for name in ["e", "f"] {
            names[try second.queue.addOperation(second.upload(name), options: EnqueueOptions()).id] = name
        }
        let report = try second.queue.restore()
        await second.queue.allOperationsFinished()
        // Then the four run one at a time, in run order, with nothing else in flight (the adds
        // made before restore() ran first, before the queue knew of the crash); none is moved aside
        #expect(report.previousLaunchEnding == .crashed(signal: SIGSEGV))
        #expect(report.runAlone.map { names[$0] } == ["a", "b", "c", "d"])
        #expect(report.movedToFailedAfterCrashes.isEmpty)
        let events = timeline(second, names: names)
        let start = try #require(events.firstIndex(of: "alone a crashes=0"))
        let isolated = Array(events[start...].prefix(12))
        #expect(isolated == [
            "alone a crashes=0", "start a", "done a", "alone b crashes=0", "start b", "done b",
            "alone c crashes=0", "start c", "done c", "alone d crashes=0", "start d", "done d",
        ])
        #expect(Set(events[..<start] + events[start...].dropFirst(12)) == ["start e", "done e", "start f", "done f"])
        #expect(try second.failedRecords().isEmpty)
        #expect(try second.directory.names(in: "attempts") == ["launch"])
    }

    @Test func anIsolatedOperationWhoseRunConditionDoesNotHoldWaitsWithoutHoldingBackTheOthers() async throws {
        // Given two operations in flight at a crash, the first of which needs a condition
        let first = try QueueFixture(maxConcurrent: 4)
        let online = ManualRunCondition(isSatisfied: true)
        first.queue.register(online, as: "network")
        var names: [PersistentOperationID: String] = [:]
        names[try first.queue.addOperation(first.upload("gated", [.hang, .succeed]), options: EnqueueOptions(conditions: ["network"])).id] = "gated"
        names[try first.queue.addOperation(first.upload("plain", [.hang, .succeed]), options: EnqueueOptions()).id] = "plain"
        try await waitUntil { first.lines.count == 2 }
        // When the next launch restores with the condition not holding
        let second = try relaunch(first, crashSignal: SIGSEGV)
        let offline = ManualRunCondition(isSatisfied: false)
        second.queue.register(offline, as: "network")
        let report = try second.queue.restore()
        #expect(report.runAlone.map { names[$0] } == ["gated", "plain"])
        // Then the gated one leaves the isolation list to wait for its condition, and the
        // other runs (alone) instead of waiting behind it
        try await waitUntil { second.lines.contains { $0.hasPrefix("plain#2") } }
        #expect(!second.lines.contains { $0.hasPrefix("gated#2") })
        #expect(try second.queue.counts().waitingForConditions == 1)
        offline.isSatisfied = true
        await second.queue.allOperationsFinished()
        #expect(second.lines.contains { $0.hasPrefix("gated#2") })
        #expect(try second.failedRecords().isEmpty)
        // And released, it still runs alone: a crash during it would be its own
        let alone = second.deliveredEvents().compactMap { event -> String? in
            if case .runningAlone(let id, _) = event { return names[id] }
            return nil
        }
        #expect(alone == ["plain", "gated"])
    }

    @Test func aPoisonOperationAmongOthersIsCaughtAndNoneOfTheOthersIsMovedAside() async throws {
        // Given a poison operation (its attempts crash the process: here, never end before the
        // simulated crash) in flight with three ordinary ones when the process first crashes
        var launch = try QueueFixture(maxConcurrent: 4)
        var names: [PersistentOperationID: String] = [:]
        for name in ["a", "poison", "b", "c"] {
            let steps: [UploadStep] = name == "poison" ? [.hang, .hang, .hang, .hang, .hang] : [.hang, .succeed]
            names[try launch.queue.addOperation(launch.upload(name, steps), options: EnqueueOptions()).id] = name
        }
        try await waitUntil { !(launch.lines.count < 4) }
        // When every launch crashes while the poison operation's attempt runs
        var reports: [RestoreReport] = []
        var crashes = 0
        while true {
            launch = try relaunch(launch, crashSignal: SIGILL)
            crashes += 1
            let report = try launch.queue.restore()
            reports.append(report)
            if report.movedToFailedAfterCrashes.isEmpty {
                // The poison one runs alone (first, once crashes are on file) and "crashes".
                // Its attempt in launch 1 + crashes.
                try await waitUntil { !(launch.lines.filter({ $0.hasPrefix("poison#") }).count < crashes + 1) }
                #expect(crashes <= 4)
                if crashes > 4 { break }
            } else {
                break
            }
        }
        await launch.queue.allOperationsFinished()
        // Then it is moved aside after 3 crashes alone (4 crashed launches in all), every other
        // operation completed, and the failed record says why
        #expect(crashes == 4)
        #expect(reports.map { $0.runAlone.map { names[$0] ?? "?" } } == [
            ["a", "poison", "b", "c"], ["poison", "b", "c"], ["poison", "b", "c"], ["b", "c"],
        ])
        #expect(reports.last?.movedToFailedAfterCrashes.map { names[$0] } == ["poison"])
        let failed = try launch.queue.failedOperations()
        #expect(failed.map { names[$0.id] } == ["poison"])
        #expect(failed.first?.reason == "it crashed the process 3 times while its attempt ran alone (crash-loop limit 3)")
        let others = launch.lines.filter { !$0.hasPrefix("poison") }
        #expect(Set(others) == ["a#1 retry=false retries=0", "b#1 retry=false retries=0", "c#1 retry=false retries=0",
                                "a#2 retry=true retries=0", "b#2 retry=true retries=0", "c#2 retry=true retries=0"])
        #expect(try launch.pendingRecords().isEmpty)
    }

    @Test func killsWhileTheAppIsInactiveBlameNobodyEvenAnOperationAloneInFlight() async throws {
        // Given an operation alone in flight, its launches killed (no crash signal) five times,
        // each after the app said it was no longer active (as iOS kills background apps)
        var launch = try QueueFixture()
        let id = try launch.queue.addOperation(launch.upload("h", [.hang, .hang, .hang, .hang, .hang, .succeed]), options: EnqueueOptions()).id
        for kill in 1...5 {
            try await waitUntil { !(launch.lines.count < kill) }
            launch.queue.applicationState = .inactive
            launch = try relaunch(launch, crashSignal: nil)
            let report = try launch.queue.restore()
            // Then each launch restores it, not isolated, and nothing is moved aside
            #expect(report.previousLaunchEnding == .killed)
            #expect(report.previousLaunchApplicationState == .inactive)
            #expect(report.restored == [id])
            #expect(report.runAlone.isEmpty)
            #expect(report.movedToFailedAfterCrashes.isEmpty)
        }
        await launch.queue.allOperationsFinished()
        // And the interrupted attempts spent none of its retries
        #expect(launch.lines.last == "h#6 retry=true retries=0")
        #expect(try launch.failedRecords().isEmpty)
    }

    @Test func anOperationWhoseAttemptsGetTheAppKilledWhileActiveIsMovedAsideAndNoOtherIs() async throws {
        // Given a poison operation whose attempts get the app killed (here: never end before
        // the simulated SIGKILL, no crash signal), in flight with three ordinary ones, and two
        // more ordinary ones waiting, on a 4-slot queue
        var launch = try QueueFixture(maxConcurrent: 4)
        var names: [PersistentOperationID: String] = [:]
        for name in ["a", "poison", "b", "c", "d", "e"] {
            let steps: [UploadStep] = name == "poison" ? Array(repeating: .hang, count: 6) : ["d", "e"].contains(name) ? [.succeed] : [.hang, .succeed]
            names[try launch.queue.addOperation(launch.upload(name, steps), options: EnqueueOptions()).id] = name
        }
        try await waitUntil { !(launch.lines.count < 4) }
        // When every launch is killed, the app active, once the poison's attempt runs
        var reports: [RestoreReport] = []
        var kills = 0
        while kills <= 5 {
            launch = try relaunch(launch, crashSignal: nil)
            kills += 1
            let report = try launch.queue.restore()
            reports.append(report)
            guard report.movedToFailedAfterCrashes.isEmpty else { break }
            try await waitUntil { !(launch.lines.filter({ $0.hasPrefix("poison#") }).count < kills + 1) }
        }
        await launch.queue.allOperationsFinished()
        // Then it is moved aside after 3 kills while it ran alone (4 killed launches started
        // it): the operations in flight beside it at the first kill ran alone after the others,
        // the poison last once a kill was on file
        #expect(kills == 4)
        #expect(reports.map(\.previousLaunchEnding) == [.killed, .killed, .killed, .killed])
        #expect(reports.map { $0.runAlone.map { names[$0] ?? "?" } } == [
            ["a", "poison", "b", "c"], ["b", "c", "poison"], ["poison"], [],
        ])
        #expect(reports.last?.movedToFailedAfterCrashes.map { names[$0] } == ["poison"])
        let failed = try launch.queue.failedOperations()
        #expect(failed.map { names[$0.id] } == ["poison"])
        #expect(failed.first?.reason == "the process was killed 3 times in a row while its attempt ran alone and the app was active (crash-loop limit 3)")
        // And every other operation completed, its interrupted attempt spending no retry
        let others = launch.lines.filter { !$0.hasPrefix("poison") }
        #expect(Set(others) == [
            "a#1 retry=false retries=0", "b#1 retry=false retries=0", "c#1 retry=false retries=0",
            "a#2 retry=true retries=0", "b#2 retry=true retries=0", "c#2 retry=true retries=0",
            "d#1 retry=false retries=0", "e#1 retry=false retries=0",
        ])
        #expect(try launch.pendingRecords().isEmpty)
    }

    @Test func afterAKillWhileActiveTheOperationsInFlightRunAloneOnceTheOtherWorkIsDone() async throws {
        // Given two operations in flight on a 2-slot queue and two more waiting when the app,
        // active, is killed
        let first = try QueueFixture(maxConcurrent: 2)
        var names: [PersistentOperationID: String] = [:]
        for name in ["a", "b"] {
            names[try first.queue.addOperation(first.upload(name, [.hang, .succeed]), options: EnqueueOptions()).id] = name
        }
        for name in ["c", "d"] {
            names[try first.queue.addOperation(first.upload(name), options: EnqueueOptions()).id] = name
        }
        try await waitUntil { !(first.lines.count < 2) }
        // When the next launch restores
        let second = try relaunch(first, maxConcurrent: 2, crashSignal: nil)
        let report = try second.queue.restore()
        await second.queue.allOperationsFinished()
        // Then the two that were in flight run alone, one at a time, after the two others
        #expect(report.previousLaunchEnding == .killed)
        #expect(report.runAlone.map { names[$0] } == ["a", "b"])
        let events = timeline(second, names: names)
        let alone = try #require(events.firstIndex(of: "alone a crashes=0"))
        #expect(Set(events[..<alone]) == ["start c", "done c", "start d", "done d"])
        #expect(Array(events[alone...]) == ["alone a crashes=0", "start a", "done a", "alone b crashes=0", "start b", "done b"])
        #expect(try second.failedRecords().isEmpty)
    }

    @Test func killsCountOnlyInARowWhileTheAppIsActive() throws {
        // Given a store with a record that has two kills on file and a third running alone,
        // and a fourth record with no evidence
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        func add(_ sequence: UInt64) throws -> String {
            let record = OperationRecord(typeIdentifier: "t", payload: try RecordFormat.encodePayload(["k": sequence]), enqueueSequence: sequence)
            try store.add(record)
            return record.id
        }
        let waiting = try add(1)
        let alone = try add(2)
        let beside = try add(3)
        _ = try store.beginLaunch(witness: true)
        try store.setAttemptsInFlight(2, kills: 2, forRecord: waiting)
        _ = try store.beginLaunch(witness: true)   // killed with `waiting` in flight, not alone
        #expect(store.suspects()[waiting] == CrashSuspect(interruptedAttempts: 2, crashes: 0, runsAlone: true, kills: 0, runsAloneAfterOthers: true))

        // When a launch is killed, active, while one operation runs alone
        try Data("2 0 2 2".utf8).write(to: URL(fileURLWithPath: directory.path("attempts", "\(waiting).suspect")))
        try store.setAttemptsInFlight(2, kills: 1, runsAlone: true, forRecord: alone)
        var launch = try store.beginLaunch(witness: true)
        // Then that is its kill, and the other's kills stay
        #expect(launch.ending == .killed)
        #expect(launch.wasActive)
        #expect(store.suspects()[alone] == CrashSuspect(interruptedAttempts: 2, crashes: 0, runsAlone: true, kills: 2, runsAloneAfterOthers: true))
        #expect(store.suspects()[waiting]?.kills == 2)
        // And a read-only view (as store-inspector shows it) reports the kills on file
        let view = try ReadOnlyPersistentStore(directory: directory.store).pendingRecords().records
        let viewed = try #require(view.first { $0.id.rawValue == alone })
        #expect(viewed.kills == 2 && viewed.runsAlone)

        // When a launch is killed while the app is not active, with one running alone
        try store.setAttemptsInFlight(3, kills: 2, runsAlone: true, forRecord: alone)
        store.clearSuspect(forRecord: alone)
        store.noteApplicationState(isActive: false)
        launch = try store.beginLaunch(witness: true)
        // Then nothing counts
        #expect(!launch.wasActive)
        #expect(store.suspects()[alone] == CrashSuspect(interruptedAttempts: 3, crashes: 0, runsAlone: true, kills: 2, runsAloneAfterOthers: true))
        #expect(store.suspects()[waiting]?.kills == 2)
        #expect(!FileManager.default.fileExists(atPath: directory.path("attempts", "lifecycle")))

        // When a launch is killed, active, with another operation in flight
        try store.setAttemptsInFlight(1, forRecord: beside)
        launch = try store.beginLaunch(witness: true)
        // Then something else kills the app too: every kill on file is cleared
        #expect(launch.ending == .killed)
        #expect(store.suspects()[beside] == CrashSuspect(interruptedAttempts: 1, crashes: 0, runsAlone: true, kills: 0, runsAloneAfterOthers: true))
        #expect(store.suspects()[alone]?.kills == 0)
        #expect(store.suspects()[waiting]?.kills == 0)
        store.close()
    }

    @Test func withoutAWitnessADeathWhileTheAppIsInactiveIsNotACrash() throws {
        // Given a store without a witness whose launch died, inactive, with one attempt in flight
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let record = OperationRecord(typeIdentifier: "t", payload: try RecordFormat.encodePayload(["k": 1]), enqueueSequence: 1)
        try store.add(record)
        _ = try store.beginLaunch(witness: false)
        try store.setAttemptsInFlight(1, forRecord: record.id)
        store.noteApplicationState(isActive: false)
        // When the store is opened again
        let launch = try store.beginLaunch(witness: false)
        // Then the death counts as no crash and no kill
        #expect(launch.ending == .unwitnessed)
        #expect(store.suspects() == [record.id: CrashSuspect(interruptedAttempts: 1, crashes: 0, runsAlone: false)])
        store.close()
    }

    @Test func theQueueFollowsTheLifecycleNotificationsItIsGiven() async throws {
        // Given a queue following two lifecycle notifications of a private center
        let fixture = try QueueFixture()
        let center = NotificationCenter()
        let resign = Notification.Name("TestWillResignActive")
        let become = Notification.Name("TestDidBecomeActive")
        fixture.queue.observeApplicationLifecycle(in: center, notifications: [(resign, .inactive), (become, .active)])
        let lifecycleFile = fixture.directory.path("attempts", "lifecycle")
        #expect(fixture.queue.applicationState == .active)
        // When the app resigns active
        center.post(name: resign, object: nil)
        // Then the queue is inactive, and says so in the launch evidence
        #expect(fixture.queue.applicationState == .inactive)
        #expect(try String(contentsOfFile: lifecycleFile, encoding: .utf8) == "inactive\n")
        // When it becomes active again, the evidence says so
        center.post(name: become, object: nil)
        #expect(fixture.queue.applicationState == .active)
        #expect(!FileManager.default.fileExists(atPath: lifecycleFile))
        // And once closed, the queue no longer follows them
        fixture.queue.close()
        center.post(name: resign, object: nil)
        #expect(fixture.queue.applicationState == .active)
    }

    @Test func withoutTheCrashSignalHandlersEveryDeathMayBeACrash() async throws {
        // Given a queue that installs no crash-signal handlers, its operation alone in flight
        var launch = try QueueFixture(witness: false)
        try launch.queue.addOperation(launch.upload("h", [.hang, .hang, .hang, .succeed]))
        var reports: [RestoreReport] = []
        for death in 1...3 {
            try await waitUntil { !(launch.lines.count < death) }
            // When its launches die three times, without a crash signal noted
            launch = try relaunch(launch, maxConcurrent: 1, crashSignal: nil, witness: false)
            reports.append(try launch.queue.restore())
        }
        // Then each death counts as a crash: it is moved aside at the third
        #expect(reports.map(\.previousLaunchEnding) == [.unwitnessed, .unwitnessed, .unwitnessed])
        #expect(reports.map(\.movedToFailedAfterCrashes.count) == [0, 0, 1])
    }

    @Test func aLaunchFileLostInAPowerCutCountsNoCrash() async throws {
        // Given a store whose launch file a power cut lost (it is not synced), with the attempt
        // marker of the one operation that was in flight, on a queue whose crash-loop limit is 1
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let journal = UUID().uuidString
        let record = OperationRecord(
            typeIdentifier: ScriptedUpload.persistenceIdentifier,
            payload: try RecordFormat.encodePayload(UploadPayload(name: "x", journal: journal)), enqueueSequence: 1
        )
        try store.add(record)
        try store.setAttemptsInFlight(1, forRecord: record.id)
        store.close()
        #expect(!FileManager.default.fileExists(atPath: directory.path("attempts", "launch")))
        // When the next launch opens and restores
        let launch = try QueueFixture(directory: directory, crashLoopLimit: 1, journal: journal)
        let report = try launch.queue.restore()
        await launch.queue.allOperationsFinished()
        // Then no crash is counted against it: it runs again, alone, as after a possible crash
        #expect(report.movedToFailedAfterCrashes.isEmpty)
        #expect(report.restored.map(\.rawValue) == [record.id])
        #expect(report.runAlone.map(\.rawValue) == [record.id])
        #expect(launch.lines == ["x#2 retry=true retries=0"])
        #expect(try launch.failedRecords().isEmpty)
    }

    @Test func anAttemptThatEndsClearsTheCrashesOnFile() async throws {
        // Given an operation with two crashes on file whose next attempt ends with a retry
        var launch = try QueueFixture(maxConcurrent: 1)
        try launch.queue.addOperation(launch.upload("x", [.hang, .hang, .retry, .hang, .hang, .succeed], retryDelay: 0))
        for crash in 1...2 {
            try await waitUntil { !(launch.lines.count < crash) }
            launch = try relaunch(launch, maxConcurrent: 1, crashSignal: SIGBUS)
            try launch.queue.restore()
        }
        // When it retries, then crashes alone twice more
        await launch.clock.waitForScheduledRetries(count: 1)
        launch.clock.advance(by: 1)
        var reports: [RestoreReport] = []
        for attempt in 4...5 {
            try await waitUntil { !(launch.lines.count < attempt) }
            launch = try relaunch(launch, maxConcurrent: 1, crashSignal: SIGBUS)
            reports.append(try launch.queue.restore())
        }
        try await waitUntil { !(launch.lines.count < 6) }
        // Then only the crashes since that retry count: 2, under the limit of 3
        #expect(reports.map(\.movedToFailedAfterCrashes.count) == [0, 0])
        let events = launch.deliveredEvents()
        #expect(events.contains { if case .runningAlone(_, crashes: 2) = $0 { return true } else { return false } })
        await launch.queue.allOperationsFinished()
        #expect(launch.lines.last == "x#6 retry=true retries=1")
    }

    @Test func aSecondOpenAfterAnInterruptedEvaluationCountsTheCrashOnce() throws {
        // Given a store whose last launch crashed with one attempt in flight, and whose next
        // launch died after turning the marker into a suspect but before removing the marker
        let directory = try TemporaryDirectory()
        let store = try RecordStore(directory: directory.store)
        let record = OperationRecord(typeIdentifier: "t", payload: try RecordFormat.encodePayload(["k": 1]), enqueueSequence: 1)
        try store.add(record)
        try store.setAttemptsInFlight(1, forRecord: record.id)
        try Data("witness on\ncrashed 11\n".utf8).write(to: URL(fileURLWithPath: directory.path("attempts", "launch")))
        let evaluated = try store.beginLaunch(witness: false)
        #expect(evaluated.ending == .crashed(signal: 11))
        #expect(store.suspects() == [record.id: CrashSuspect(interruptedAttempts: 1, crashes: 1, runsAlone: true)])
        try store.setAttemptsInFlight(1, forRecord: record.id)   // the marker is back, as if never removed
        try Data("witness on\ncrashed 11\nevaluated\n".utf8).write(to: URL(fileURLWithPath: directory.path("attempts", "launch")))
        // When the store is opened again
        _ = try store.beginLaunch(witness: false)
        // Then the crash was counted once, and the marker is gone
        #expect(store.suspects() == [record.id: CrashSuspect(interruptedAttempts: 1, crashes: 1, runsAlone: true)])
        #expect(try directory.names(in: "attempts") == ["launch", "\(record.id).suspect"])
        store.close()
    }

    @Test func damagedEvidenceFilesAreReadCautiouslyAndLoseNothing() async throws {
        // Given a store with two pending records, a garbage suspect file for one, a directory
        // where a suspect file should be for the other, and a garbage launch file
        let first = try QueueFixture(suspended: true)
        let a = try first.queue.addOperation(first.upload("a"), options: EnqueueOptions()).id
        let b = try first.queue.addOperation(first.upload("b"), options: EnqueueOptions()).id
        first.queue.close()
        try Data([0xFF, 0x00, 0x41]).write(to: URL(fileURLWithPath: first.directory.path("attempts", "\(a.rawValue).suspect")))
        try FileManager.default.createDirectory(atPath: first.directory.path("attempts", "\(b.rawValue).suspect"), withIntermediateDirectories: false)
        try Data(repeating: 0x7A, count: 10_000).write(to: URL(fileURLWithPath: first.directory.path("attempts", "launch")))
        // When the next launch opens and restores
        let second = try QueueFixture(directory: first.directory, journal: first.journal)
        let report = try second.queue.restore()
        await second.queue.allOperationsFinished()
        // Then both records run (each once, alone: an unreadable suspect file counts as one
        // interrupted attempt that runs alone), nothing is moved aside or lost
        #expect(Set(report.restored) == [a, b])
        #expect(Set(report.runAlone) == [a, b])
        #expect(report.movedToFailedAfterCrashes.isEmpty)
        #expect(Set(second.lines) == ["a#2 retry=true retries=0", "b#2 retry=true retries=0"])
        #expect(try second.pendingRecords().isEmpty)
    }
}
