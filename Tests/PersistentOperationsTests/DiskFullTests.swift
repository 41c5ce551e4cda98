import Foundation
import Testing
@testable import PersistentOperations

/// A real full disk: a 256 KiB tmpfs. Needs permission to mount (root on Linux); skipped
/// otherwise, where the fault-injection tests (`FaultInjectionTests`, `QueueControlTests`)
/// cover ENOSPC on write instead.
@Suite(
    "Disk full", .timeLimit(.minutes(2)),
    .enabled(if: SmallFileSystem.canMount, "cannot mount a size-limited tmpfs here (needs root and mount permission)")
)
struct DiskFullTests {
    @Test func addsFailCleanlyWhenTheDiskIsFullAndEverythingAcknowledgedRunsAfterward() async throws {
        // Given a store on a 256 KiB file system
        let mountPoint = try TemporaryDirectory()
        try await onDedicatedThread { try SmallFileSystem.mount(at: mountPoint.url.path, size: "256k") }
        defer { SmallFileSystem.unmount(mountPoint.url.path) }
        let journal = UUID().uuidString
        let clock = ManualRetryScheduler()
        let events = Locked<[PersistentOperationEvent]>([])
        var queue: PersistentOperationQueue? = try QueueFixture.open(mountPoint, clock: clock, suspended: true, events: events)

        // When operations are added until the disk is full
        var acknowledged: [String] = []
        var failure: (any Error)?
        for index in 0..<10_000 {
            let name = "upload-\(index)"
            let upload = ScriptedUpload(payload: UploadPayload(name: name, journal: journal))
            do {
                try queue!.addOperation(upload)
                acknowledged.append(name)
            } catch {
                failure = error
                break
            }
        }

        // Then the add that did not fit throws a clear write error naming ENOSPC, after some fitted
        let error = try #require(failure as? PersistenceError, "no add failed: \(acknowledged.count) fitted")
        #expect(error.code == .writeFailed)
        #expect("\(error)".contains("\(ENOSPC)") || "\(error)".localizedCaseInsensitiveContains("space"), "\(error)")
        #expect(acknowledged.count > 10)
        // And it left no temporary file, and every acknowledged record reads back intact
        #expect(try !mountPoint.names(in: "pending").contains(where: StoreLayout.isTemporaryFileName))
        let onDisk = try RecordStore(directory: mountPoint.store, access: .readOnly).loadPending()
        #expect(onDisk.records.count == acknowledged.count)
        #expect(onDisk.skipped.isEmpty)

        // When the app restarts on the still-full disk and runs everything
        queue!.close()
        queue = nil
        let reopened = try QueueFixture.open(mountPoint, clock: clock, events: events)
        let report = try reopened.restore()
        #expect(report.restored.count == acknowledged.count)
        #expect(report.quarantined.isEmpty)
        let drained = try await onDedicatedThread { () -> Bool in
            let done = DispatchSemaphore(value: 0)
            Thread.detachNewThread {
                reopened.waitUntilAllOperationsAreFinished()
                done.signal()
            }
            return done.wait(timeout: .now() + 60) == .success
        }
        #expect(drained, "the restored operations did not finish within 60 s")
        // Then every acknowledged operation ran, nothing is left pending, and adding works again
        let ran = Set(Journal.lines(journal).map { String($0.prefix { $0 != "#" }) })
        #expect(ran == Set(acknowledged))
        #expect(try mountPoint.names(in: "pending").isEmpty)
        try reopened.addOperation(ScriptedUpload(payload: UploadPayload(name: "after", journal: journal)))
        print("disk full: \(acknowledged.count) adds fitted in 256 KiB, the next threw \(error.code); all \(ran.count) ran after a restart on the full disk")
        reopened.close()
    }
}

/// Mounting a size-limited tmpfs for a test.
enum SmallFileSystem {
    static let canMount: Bool = {
        guard let directory = try? TemporaryDirectory() else { return false }
        guard (try? mount(at: directory.url.path, size: "64k")) != nil else { return false }
        unmount(directory.url.path)
        return true
    }()

    static func mount(at path: String, size: String) throws {
        let status = run("/bin/mount", ["-t", "tmpfs", "-o", "size=\(size),mode=0700", "tmpfs", path])
        guard status == 0 else { throw ChildAppError("mount -t tmpfs exited with \(status)") }
    }

    static func unmount(_ path: String) {
        _ = run("/bin/umount", [path])
    }

    private static func run(_ executable: String, _ arguments: [String]) -> Int32 {
        guard FileManager.default.isExecutableFile(atPath: executable) else { return -1 }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return -1 }
        process.waitUntilExit()
        return process.terminationStatus
    }
}
