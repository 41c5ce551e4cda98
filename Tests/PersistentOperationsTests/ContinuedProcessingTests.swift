import Foundation
import Testing
@testable import PersistentOperations

// A run of one group's work for iOS 26's `BGContinuedProcessingTask`: the README's handler,
// compiled and run against stand-ins with the framework's names (see
// BackgroundDocumentationTests), and the run's focus and progress.

/// A stand-in for BackgroundTasks' `BGContinuedProcessingTaskRequest` (iOS 26).
final class BGContinuedProcessingTaskRequest {
    let identifier: String
    let title: String
    let subtitle: String

    init(identifier: String, title: String, subtitle: String) {
        self.identifier = identifier
        self.title = title
        self.subtitle = subtitle
    }
}

/// A stand-in for BackgroundTasks' `BGContinuedProcessingTask` (iOS 26): a `BGTask` with a
/// title, a subtitle and a progress the system shows. The person's cancel and the system's
/// expiry both call its expiration handler (`expire()`).
final class BGContinuedProcessingTask: BGTask, @unchecked Sendable {
    let progress = Progress(totalUnitCount: 0)
    let title: String
    let subtitle: String

    init(title: String, subtitle: String) {
        self.title = title
        self.subtitle = subtitle
    }
}

@Suite("Persistent queue: a run of one group's work, for a continued-processing task", .timeLimit(.minutes(1)))
struct ContinuedProcessingTests {
    /// A suspended queue of 2 slots for `ReportingWork`, updating progress every 10 ms.
    static func queue(_ directory: TemporaryDirectory) throws -> PersistentOperationQueue {
        try QueueProgressTests.queue(directory: directory, maxConcurrent: 2).0
    }

    @Test func theReadmesHandlerRunsTheExportAloneFeedsTheTasksProgressAndCompletesIt() async throws {
        // Given a queue in the background (suspended) holding 3 photos to export and 2 other
        // operations
        let directory = try TemporaryDirectory()
        let queue = try Self.queue(directory)
        defer { queue.close() }
        var exports: [PersistentOperationID] = []
        for _ in 0..<3 {
            exports.append(try queue.addOperation(ReportingWork(payload: .init(steps: 4)), options: EnqueueOptions(tags: ["export"])).id)
        }
        for _ in 0..<2 { try queue.addOperation(ReportingWork(payload: .init())) }

        // snippet: continued-processing-handler
        BGTaskScheduler.shared.register(forTaskWithIdentifier: "com.example.export", using: nil) { task in
            guard let task = task as? BGContinuedProcessingTask else { return }
            // Only the work the person asked for, its progress shown by the system
            let run = queue.startBoundedRun(of: .tag("export"), reportingTo: task.progress)
            task.expirationHandler = { run.stop() }   // the person cancelled, or the system ended it
            Task {
                let report = await run.report
                task.setTaskCompleted(success: report.ending == .drained)
            }
        }
        // end snippet

        // When the person taps "Export" in the app
        // snippet: continued-processing-request
        let request = BGContinuedProcessingTaskRequest(
            identifier: "com.example.export", title: "Exporting photos", subtitle: "3 photos"
        )
        try BGTaskScheduler.shared.submit(request)
        // end snippet
        let task = try #require(BGTaskScheduler.shared.startedContinuedTasks.last)

        // Then the export runs, alone: the task completes with success, its progress whole
        try #require(try await eventually { task.completedWithSuccess != nil })
        #expect(task.completedWithSuccess == true)
        #expect(task.progress.totalUnitCount == 3_000 && task.progress.completedUnitCount == 3_000)
        // And the other operations wait for the queue to be resumed, reported queued
        let left = queue.operations()
        #expect(left.count == 2 && left.allSatisfy { $0.state == .queued && !exports.contains($0.id) })
        #expect(queue.isSuspended)
        queue.isSuspended = false
        await queue.allOperationsFinished()
        #expect(try queue.counts().pending == 0)
    }

    @Test func aStopLeavesTheAttemptInFlightPendingAsAnUncountedRetryWithTheTasksProgressWhereItWas() async throws {
        // Given an export whose attempt reports half its units and waits, in a run of its tag
        let directory = try TemporaryDirectory()
        let queue = try Self.queue(directory)
        defer { queue.close() }
        let (name, gate) = ReportingWork.gate()
        let export = try queue.addOperation(ReportingWork(payload: .init(steps: 2, total: 4, gate: name)), options: EnqueueOptions(tags: ["export"]))
        let taskProgress = Progress(totalUnitCount: 0)
        let run = queue.startBoundedRun(of: .tag("export"), reportingTo: taskProgress)
        #expect(taskProgress.totalUnitCount == 1_000)

        // When the task's progress shows the half, and the person cancels
        #expect(try await eventually { taskProgress.completedUnitCount == 500 })
        run.stop()
        let report = await run.report
        gate.signal()

        // Then the run ended stopped, the attempt as an uncounted retry, its record pending
        #expect(report.ending == .stopped)
        #expect(report.stopped == [export.id])
        let info = try #require(queue.operations().first)
        #expect(info.id == export.id && info.numberOfRetries == 0)
        #expect(taskProgress.completedUnitCount == 500)
    }

    @Test func aRunOfTheWholeQueueBesideARunOfAScopeLetsEverythingStartAndTheFocusEndsWithThem() async throws {
        // Given a suspended queue holding work of two tags
        let directory = try TemporaryDirectory()
        let queue = try Self.queue(directory)
        defer { queue.close() }
        for tag in ["export", "sync", "sync"] {
            try queue.addOperation(ReportingWork(payload: .init()), options: EnqueueOptions(tags: [tag]))
        }

        // When a run of "export" and, beside it, a run of the whole queue are active
        let (name, gate) = ReportingWork.gate()
        try queue.addOperation(ReportingWork(payload: .init(gate: name)), options: EnqueueOptions(tags: ["export"]))
        let scoped = queue.startBoundedRun(of: .tag("export"))
        #expect(queue.state.withLock { $0.focus } == [.tag("export")])
        let whole = queue.startBoundedRun(until: .distantFuture)

        // Then everything runs but the gated export, and the focus is gone
        #expect(queue.state.withLock { $0.focus } == nil)
        #expect(try await eventually { try queue.counts().pending == 1 })
        gate.signal()
        let reports = (await scoped.report, await whole.report)
        #expect(reports.0.ending == .drained && reports.1.ending == .drained)
        #expect(try queue.counts().pending == 0)
        #expect(queue.state.withLock { $0.focus } == nil)
    }
}
