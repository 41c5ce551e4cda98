import Foundation

/// Makes the contents of newly written files durable, letting concurrent writers share one
/// file-system sync (group commit).
///
/// Every file is still synced by its own writer with ``FileSystem/synchronize``, and that call
/// alone decides whether the write succeeded. What changes under load is its cost: a new file's
/// `fsync` makes the file system commit its journal and flush the drive's cache, and eight
/// writers doing that one after another pay for eight commits. When writers arrive while
/// another sync is running, they wait for it, and the next one to lead flushes everything they
/// wrote with one ``FileSystem/synchronizeFileSystem`` call (`syncfs(2)` on Linux) before
/// each of them makes its own, now cheap, `fsync`. A writer that arrives while no other is
/// waiting syncs its own file at once, so a single producer pays nothing extra.
///
/// Together with a cheaper attempt marker, this took the queue with eight producers from
/// about 0.9 to 1.4–2.0 times the records per second of a serial write+fsync+rename+fsync
/// loop (benchmark P3). Where the file system offers no such call (Apple platforms) each
/// writer simply syncs its own file.
///
/// Thread safety: any thread may call ``synchronize(_:)``.
package final class ContentSynchronizer: Sendable {
    private let group = GroupCommit()
    private let fileSystem: FileSystem

    /// Creates a synchroniser that makes its calls through `fileSystem`.
    package init(fileSystem: FileSystem) {
        self.fileSystem = fileSystem
    }

    /// How many calls have arrived so far (for tests: a call counts as soon as it waits).
    package var callsArrived: UInt64 {
        group.callsArrived
    }

    /// Returns once the file open as `descriptor`, whose writes are complete, is on stable
    /// storage.
    ///
    /// - Throws: the error of the file's own sync (``FileSystem/synchronize``).
    package func synchronize(_ descriptor: Int32) throws {
        guard let synchronizeFileSystem = fileSystem.synchronizeFileSystem else {
            try fileSystem.synchronize(descriptor)
            return
        }
        var isOwnFileSynced = false
        try group.join { callersCovered in
            if callersCovered == 1 {
                // Nobody to share with: the file's own sync is all it takes, and it reports.
                try fileSystem.synchronize(descriptor)
                isOwnFileSynced = true
            } else {
                // An error here is not reported: each writer's own sync below is the one
                // that counts, and it redoes whatever this call did not manage.
                try? synchronizeFileSystem(descriptor)
            }
        }
        if !isOwnFileSynced {
            try fileSystem.synchronize(descriptor)
        }
    }
}
