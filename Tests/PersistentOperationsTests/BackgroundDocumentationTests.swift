import Foundation
import Testing
import PersistentOperations

// The code samples of the README's sections "Running in the background" and "Periodic
// operations" and of the DocC article *Background runs and periodic work*, compiled and run
// here so they cannot rot. `scripts/readme-snippets.py --check` fails when a sample differs
// from its `// snippet:` region below. (The `BGProcessingTask` handler those documents show
// uses Apple's BackgroundTasks framework, which is not available here: `BGTask`,
// `BGProcessingTaskRequest` and `BGTaskScheduler` below stand in for it, with its names and
// shapes; `FakeBackgroundTask` and `BackgroundScheduler` stand in for a task and a scheduler
// in the shorter samples.)

/// A stand-in for BackgroundTasks' `BGTask`: the system calls its expiration handler when the
/// background time is up, and the app calls `setTaskCompleted(success:)`.
class BGTask: @unchecked Sendable {
    // @unchecked: a class the continued-processing stand-in subclasses; its state is in `Locked`s.
    private let handler = Locked<(@Sendable () -> Void)?>(nil)
    private let completion = Locked<Bool?>(nil)

    var expirationHandler: (@Sendable () -> Void)? {
        get { handler.withLock { $0 } }
        set { handler.withLock { $0 = newValue } }
    }

    func setTaskCompleted(success: Bool) {
        completion.withLock { $0 = success }
    }

    /// The `success` the app passed to `setTaskCompleted(success:)`, once it did.
    var completedWithSuccess: Bool? { completion.withLock { $0 } }

    /// What the system does when the task's time is up.
    func expire() {
        expirationHandler?()
    }
}

/// A stand-in for BackgroundTasks' `BGProcessingTaskRequest`.
final class BGProcessingTaskRequest {
    let identifier: String
    var earliestBeginDate: Date?
    var requiresNetworkConnectivity = false

    init(identifier: String) {
        self.identifier = identifier
    }
}

/// A stand-in for BackgroundTasks' `BGTaskScheduler`: keeps the launch handlers and the
/// requests submitted, and launches a task when the test says so.
final class BGTaskScheduler: Sendable {
    struct Submitted: Sendable, Equatable {
        var identifier: String
        var earliestBeginDate: Date?
        var requiresNetworkConnectivity: Bool
    }

    static let shared = BGTaskScheduler()
    private let handlers = Locked<[String: @Sendable (BGTask) -> Void]>([:])
    private let requests = Locked<[Submitted]>([])

    @discardableResult
    func register(forTaskWithIdentifier identifier: String, using queue: DispatchQueue?, launchHandler: @escaping @Sendable (BGTask) -> Void) -> Bool {
        handlers.withLock { $0[identifier] = launchHandler }
        return true
    }

    func submit(_ request: BGProcessingTaskRequest) throws {
        let submitted = Submitted(identifier: request.identifier, earliestBeginDate: request.earliestBeginDate,
                                  requiresNetworkConnectivity: request.requiresNetworkConnectivity)
        requests.withLock { $0.append(submitted) }
    }

    /// What the system does when it grants the app the background task `identifier`.
    func launch(_ identifier: String) -> BGTask {
        let task = BGTask()
        let handler = handlers.withLock { $0[identifier] }
        handler?(task)
        return task
    }

    /// What iOS 26 does with a continued-processing request submitted in the foreground: it
    /// starts the task at once (here, the tasks started are kept for the test).
    func submit(_ request: BGContinuedProcessingTaskRequest) throws {
        let task = BGContinuedProcessingTask(title: request.title, subtitle: request.subtitle)
        continuedTasks.withLock { $0.append(task) }
        let handler = handlers.withLock { $0[request.identifier] }
        handler?(task)
    }

    private let continuedTasks = Locked<[BGContinuedProcessingTask]>([])
    /// The continued-processing tasks started so far.
    var startedContinuedTasks: [BGContinuedProcessingTask] { continuedTasks.withLock { $0 } }

    var submitted: [Submitted] { requests.withLock { $0 } }
}

/// A stand-in for a `BGTask`: the system calls its expiration handler when the background
/// time is up.
final class FakeBackgroundTask: Sendable {
    private let handler = Locked<(@Sendable () -> Void)?>(nil)

    var expirationHandler: (@Sendable () -> Void)? {
        get { handler.withLock { $0 } }
        set { handler.withLock { $0 = newValue } }
    }

    /// What the system does when the task's time is up.
    func expire() {
        expirationHandler?()
    }
}

/// A stand-in for `BGTaskScheduler`: remembers the earliest start of each requested run.
final class BackgroundScheduler: Sendable {
    private let requests = Locked<[Date]>([])

    func requestRun(earliest: Date) {
        requests.withLock { $0.append(earliest) }
    }

    var requested: [Date] { requests.withLock { $0 } }
}

/// An upload whose first attempt hangs until it is stopped (as a slow network would), and
/// whose later attempts succeed.
final class LargeUpload: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable; the rest of the state belongs to RetryingOperation.
    static let persistenceIdentifier = "com.example.large-upload"
    /// Each attempt's `isRetry`, then "cancelled" when an attempt's work is cancelled.
    static let log = Locked<[String]>([])
    let payload: Upload

    init(payload: Upload) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { true }

    override func startBaseOperation(isRetry: Bool) {
        Self.log.withLock { $0.append("\(payload.file) isRetry=\(isRetry)") }
        if isRetry {
            DispatchQueue.global().async { self.baseOperationEnded() }
        }
        // The first attempt never ends by itself.
    }

    // Called, by the default `abandonBaseOperation(_:)`, when a bounded run stops the attempt.
    override func cancelBaseOperation() {
        Self.log.withLock { $0.append("\(payload.file) cancelled") }
    }
}

/// The region whose catalogue a ``RefreshCatalogue`` fetches.
struct Catalogue: Codable, Sendable {
    var region: String
}

struct CatalogueUnavailable: Error, CustomStringConvertible {
    var description: String { "the catalogue server is down" }
}

/// A periodic refresh: succeeds, except for the region "offline", whose periods fail for good.
final class RefreshCatalogue: RetryingOperation, PersistentOperation, @unchecked Sendable {
    // @unchecked: `payload` is immutable; the rest of the state belongs to RetryingOperation.
    static let persistenceIdentifier = "com.example.refresh-catalogue"
    /// One line per attempt: the region and the attempt's `isRetry`.
    static let log = Locked<[String]>([])
    let payload: Catalogue

    init(payload: Catalogue) {
        self.payload = payload
        super.init()
    }

    override var isAsynchronous: Bool { false }

    override func startBaseOperation(isRetry: Bool) {
        Self.log.withLock { $0.append("\(payload.region) isRetry=\(isRetry)") }
        if payload.region == "offline" {
            baseOperationEnded(failingWith: CatalogueUnavailable())
        } else {
            baseOperationEnded()
        }
    }
}

@Suite("Documentation examples (background runs and periodic work)", .timeLimit(.minutes(1)))
struct BackgroundDocumentationTests {
    /// Waits until `condition` holds, firing the test clock's timers that fall due meanwhile:
    /// the next period's timer may be set just after the clock moved past its date.
    private func firingTimers(of clock: ManualRetryScheduler, until condition: () throws -> Bool) async throws -> Bool {
        try await eventually {
            clock.advance(by: 0)
            return try condition()
        }
    }

    @Test func aRunRunsTheDueWorkThenSuspendsTheQueueAndSaysWhenMoreIsDue() async throws {
        // An app launched in the background: its queue opens suspended
        let temporary = try TemporaryDirectory()
        let operationQueue = OperationQueue()
        operationQueue.isSuspended = true
        let queue = try PersistentOperationQueue(directory: temporary.store, operationQueue: operationQueue)
        queue.register(PersistentUpload.self)
        try queue.restore()
        for file in ["IMG_0101.heic", "IMG_0102.heic"] {
            try queue.addOperation(PersistentUpload(payload: Upload(file: file, album: 1)))
        }
        let later = try queue.addOperation(
            PersistentUpload(payload: Upload(file: "IMG_0103.heic", album: 1)),
            options: EnqueueOptions(notBefore: Date().addingTimeInterval(3600))
        )
        let backgroundScheduler = BackgroundScheduler()

        // snippet: background-run
        let report = await queue.run(until: Date().addingTimeInterval(25))   // the time the system gave
        print("\(report.succeeded.count) succeeded, \(report.dueOperations) still due")
        if let next = report.nextDueDate {
            backgroundScheduler.requestRun(earliest: next)   // the app's next background task
        }
        // end snippet

        #expect(report.ending == .drained)   // the upload not due before the deadline did not hold it
        #expect(report.succeeded.count == 2)
        #expect(report.failed.isEmpty && report.stopped.isEmpty && report.stillRunning.isEmpty)
        #expect(report.dueOperations == 0)
        #expect(report.endedAt >= report.startedAt)
        let notBefore = try #require(queue.operation(withID: later.id)?.notBefore)
        #expect(report.nextDueDate == notBefore)
        #expect(backgroundScheduler.requested == [notBefore])
        #expect(queue.isSuspended)   // and it stays suspended after the run
        #expect(DocumentationServer.uploaded.withLock { $0.contains("IMG_0101.heic") && $0.contains("IMG_0102.heic") })
        #expect(!DocumentationServer.uploaded.withLock { $0.contains("IMG_0103.heic") })
        #expect(try queue.counts().pending == 1)
        queue.close()
    }

    @Test func stoppingARunEndsTheAttemptInFlightAsAnUncountedRetryThatRunsAgainLater() async throws {
        let fixture = try QueueFixture(suspended: true)
        let queue = fixture.queue
        queue.register(LargeUpload.self)
        let upload = LargeUpload(payload: Upload(file: "VID_0201.mov", album: 2))
        try queue.addOperation(upload)
        let id = try #require(queue.identifier(of: upload))
        let backgroundTask = FakeBackgroundTask()
        // The system takes its time back once the upload is under way
        let expiry = Task {
            let isUnderWay = try await eventually {
                LargeUpload.log.withLock { $0.contains("VID_0201.mov isRetry=false") } && backgroundTask.expirationHandler != nil
            }
            #expect(isUnderWay)
            backgroundTask.expire()
        }

        // snippet: background-run-stop
        let run = queue.startBoundedRun(until: .distantFuture)   // until stopped, or idle
        backgroundTask.expirationHandler = { run.stop() }        // the system wants its time back
        let report = await run.report                            // once the stopped attempts are saved
        print("\(report.stopped.count) attempt(s) stopped; they run again as uncounted retries")
        // end snippet

        try await expiry.value
        #expect(report.ending == .stopped)
        #expect(report.stopped == [id])
        #expect(report.stillRunning.isEmpty)
        #expect(queue.isSuspended)
        #expect(LargeUpload.log.withLock { $0.contains("VID_0201.mov cancelled") })   // abandonBaseOperation(.stopped)
        // The record was rewritten: no retry spent, the stop as its last error
        let info = try #require(queue.operation(withID: id))
        #expect(info.numberOfRetries == 0)
        #expect(info.numberOfAttempts == 1)
        #expect(info.lastErrorDescription?.contains("stopped") == true)
        // The stop is a retry that does not count
        let retries = { fixture.deliveredEvents().compactMap { event -> Bool? in
            if case .retryScheduled(id, let isCounted, _, _) = event { return isCounted }
            return nil
        } }
        #expect(try await eventually { retries() == [false] })

        // Back in the foreground, the queue is resumed and the upload runs again, as a retry
        queue.isSuspended = false
        #expect(try await firingTimers(of: fixture.clock) { upload.isFinished })   // the retry is due at once
        await queue.allOperationsFinished()
        #expect(upload.outcome?.isSuccess == true)
        #expect(LargeUpload.log.withLock { $0.filter { $0.hasPrefix("VID_0201.mov isRetry") } }
            == ["VID_0201.mov isRetry=false", "VID_0201.mov isRetry=true"])
        #expect(try fixture.pendingRecords().isEmpty)
    }

    @Test func theBackgroundTaskHandlerSucceedsOnlyWhenEverythingDueRanAndAlwaysAsksForTheNextRun() async throws {
        // An app launched in the background: a 15-minute refresh series, and two messages
        // waiting for the network, which is down
        let fixture = try QueueFixture(suspended: true)
        let queue = fixture.queue
        let clock = fixture.clock
        let start = clock.now
        queue.register(RefreshCatalogue.self)
        queue.register(LargeUpload.self)
        let network = ManualRunCondition(isSatisfied: false)
        queue.register(network, as: "network")
        try queue.addOperation(RefreshCatalogue(payload: Catalogue(region: "us")), options: EnqueueOptions(repeating: .every(900)))
        for index in 1...2 {
            try queue.addOperation(fixture.upload("message\(index)"), options: EnqueueOptions(conditions: ["network"]))
        }

        // snippet: background-task-handler
        BGTaskScheduler.shared.register(forTaskWithIdentifier: "com.example.uploads", using: nil) { task in
            let run = queue.startBoundedRun(until: .distantFuture)   // until stopped, or idle for 30 s
            task.expirationHandler = { run.stop() }                  // the system wants its time back
            Task {
                let report = await run.report
                if let next = report.nextDueDate {   // work left: due now (blocked, cut short) or later
                    let request = BGProcessingTaskRequest(identifier: "com.example.uploads")
                    request.earliestBeginDate = next
                    request.requiresNetworkConnectivity = true
                    try? BGTaskScheduler.shared.submit(request)
                }
                // A success only when everything due ran: not when work waits for the network
                // (.blocked), nor when the run was cut short (.stopped, .deadlineReached)
                task.setTaskCompleted(success: report.ending == .drained)
            }
        }
        // end snippet

        // A task without network: the refresh runs, the messages cannot. Not a success, and
        // the next run is asked for at once (it waits for the network)
        let offline = BGTaskScheduler.shared.launch("com.example.uploads")
        try #require(try await eventually(seconds: 40) { offline.completedWithSuccess != nil })
        #expect(offline.completedWithSuccess == false)
        #expect(BGTaskScheduler.shared.submitted.last == .init(identifier: "com.example.uploads", earliestBeginDate: start, requiresNetworkConnectivity: true))
        #expect(RefreshCatalogue.log.withLock { $0.contains("us isRetry=false") })
        #expect(fixture.lines.isEmpty)

        // A task with network: the messages are sent, and the run ends by itself, since the
        // next period is 15 minutes away. A success; the next run is asked for then
        network.isSatisfied = true
        #expect(try await eventually { queue.operations().allSatisfy { $0.state != .waitingForConditions } })
        let online = BGTaskScheduler.shared.launch("com.example.uploads")
        try #require(try await eventually(seconds: 40) { online.completedWithSuccess != nil })
        #expect(online.completedWithSuccess == true)
        #expect(BGTaskScheduler.shared.submitted.last?.earliestBeginDate == start.addingTimeInterval(900))
        #expect(fixture.lines.count == 2)

        // A task whose time runs out mid-upload: not a success; the next run is asked for at once
        try queue.addOperation(LargeUpload(payload: Upload(file: "VID_0301.mov", album: 3)))
        let expiring = BGTaskScheduler.shared.launch("com.example.uploads")
        #expect(try await eventually { LargeUpload.log.withLock { $0.contains("VID_0301.mov isRetry=false") } })
        expiring.expire()
        try #require(try await eventually(seconds: 40) { expiring.completedWithSuccess != nil })
        #expect(expiring.completedWithSuccess == false)
        #expect(BGTaskScheduler.shared.submitted.last?.earliestBeginDate == clock.now)
        #expect(BGTaskScheduler.shared.submitted.count == 3)
        queue.close()
    }

    @Test func aPeriodicOperationRunsEachPeriodOnAFixedGridAndStaysStoredBetweenThem() async throws {
        let fixture = try QueueFixture()
        let queue = fixture.queue
        let clock = fixture.clock
        queue.register(RefreshCatalogue.self)
        let start = clock.now

        // snippet: periodic-operation
        // Refresh the catalogue every hour; a period may start up to 10 minutes early.
        let series = try queue.addOperation(
            RefreshCatalogue(payload: Catalogue(region: "eu")),
            options: EnqueueOptions(uniqueKey: "catalogue-eu", repeating: .every(3600, flex: 600))
        )
        // end snippet

        // The first period runs at once; then the record stays, scheduled for the next one
        // (`periodEnded` is sent once it is saved)
        let firstPeriodEnded = PersistentOperationEvent.periodEnded(series.id, failure: nil, nextPeriodAt: start.addingTimeInterval(3000))
        #expect(try await eventually { fixture.deliveredEvents().contains(firstPeriodEnded) })
        // snippet: periodic-operation-info
        if let info = queue.operation(withID: series.id), let target = info.periodTarget {
            print("\(info.completedPeriods) period(s) done; the next targets \(target), from \(info.notBefore ?? target)")
        }
        // end snippet
        var info = try #require(queue.operation(withID: series.id))
        #expect(info.repeating == .every(3600, flex: 600))
        #expect(info.state == .scheduled)
        #expect(info.periodTarget == start.addingTimeInterval(3600))
        #expect(info.notBefore == start.addingTimeInterval(3000))   // the window opens 10 minutes early
        #expect(info.lastErrorDescription == nil)
        #expect(info.completedPeriods == 1)
        #expect(queue.nextDueDate == start.addingTimeInterval(3000))
        #expect(!fixture.deliveredEvents().contains(.succeeded(series.id)))
        await queue.allOperationsFinished()   // a series between periods does not hold this

        // Adding the series again with its key keeps the one stored
        let again = try queue.addOperation(
            RefreshCatalogue(payload: Catalogue(region: "eu")),
            options: EnqueueOptions(uniqueKey: "catalogue-eu", repeating: .every(3600, flex: 600))
        )
        #expect(again.disposition == .keptExisting && again.id == series.id)

        // When the window opens, the second period runs — a new instance, not a retry — and
        // the next target is measured from this one's target, not from when it ran
        clock.advance(by: 3000)
        let secondPeriodEnded = PersistentOperationEvent.periodEnded(series.id, failure: nil, nextPeriodAt: start.addingTimeInterval(6600))
        #expect(try await firingTimers(of: clock) { fixture.deliveredEvents().contains(secondPeriodEnded) })
        info = try #require(queue.operation(withID: series.id))
        #expect(info.completedPeriods == 2)
        #expect(info.periodTarget == start.addingTimeInterval(7200))
        #expect(info.notBefore == start.addingTimeInterval(6600))
        #expect(RefreshCatalogue.log.withLock { $0.filter { $0.hasPrefix("eu ") } } == ["eu isRetry=false", "eu isRetry=false"])

        // Cancelling ends the series
        queue.cancelOperation(withID: series.id)
        #expect(try await eventually { try fixture.pendingRecords().isEmpty })
        #expect(queue.nextDueDate == nil)
    }

    @Test func aPeriodThatFailsForGoodIsReportedAndTheSeriesGoesOn() async throws {
        let fixture = try QueueFixture()
        let queue = fixture.queue
        queue.register(RefreshCatalogue.self)
        let start = fixture.clock.now
        let series = try queue.addOperation(RefreshCatalogue(payload: Catalogue(region: "offline")),
                                            options: EnqueueOptions(repeating: .every(60)))
        let failedPeriod = PersistentOperationEvent.periodEnded(series.id, failure: "the catalogue server is down",
                                                                 nextPeriodAt: start.addingTimeInterval(60))
        #expect(try await eventually { fixture.deliveredEvents().contains(failedPeriod) })
        let info = try #require(queue.operation(withID: series.id))
        #expect(info.completedPeriods == 1)
        #expect(info.lastErrorDescription == "the catalogue server is down")
        #expect(info.periodTarget == start.addingTimeInterval(60))
        #expect(!fixture.deliveredEvents().contains { if case .failed = $0 { return true } else { return false } })
        #expect(try queue.failedOperations().isEmpty)   // nothing in the failed area

        // And the periods that fall before a run's deadline, within its idle limit, run in it
        queue.isSuspended = true
        let run = queue.startBoundedRun(until: start.addingTimeInterval(90), idleLimit: 60)
        fixture.clock.advance(by: 60)
        #expect(try await firingTimers(of: fixture.clock) { run.isFinished })
        let report = await run.report
        #expect(report.ending == .drained)   // the next window, at 120 s, is after the deadline
        #expect(report.periodsEnded == [series.id])
        #expect(report.nextDueDate == start.addingTimeInterval(120))
        #expect(queue.isSuspended)
    }
}
