import Foundation

/// Makes directory changes durable, sharing one directory sync among concurrent callers
/// (group commit).
///
/// Each caller first makes its own change (a rename or unlink) and then calls
/// ``synchronize()``, which returns once a directory sync that *started after* the change has
/// succeeded. One caller at a time is the leader and runs the sync; callers that arrive during
/// it wait, and the next leader's single sync covers all of them. Under load this turns N
/// directory syncs into a handful.
///
/// Thread safety: any thread may call ``synchronize()``.
package final class DirectorySynchronizer: @unchecked Sendable {
    // @unchecked: the mutable counters below are only read or written while `condition` is locked.
    private let condition = NSCondition()
    private let path: String
    private let fileSystem: FileSystem

    /// The ticket given to the most recent caller.
    private var lastTicket: UInt64 = 0
    /// Every ticket up to this one has an outcome: synced, or an entry in `failures`.
    private var settledThrough: UInt64 = 0
    /// Tickets whose covering sync failed, with the error, until their caller collects it.
    private var failures: [UInt64: any Error] = [:]
    private var isLeaderSyncing = false

    /// Creates a synchroniser for the directory at `path`.
    package init(path: String, fileSystem: FileSystem) {
        self.path = path
        self.fileSystem = fileSystem
    }

    /// Returns once a sync of the directory that started after this call began has succeeded.
    ///
    /// - Throws: the error of the sync that covered this call, when it failed. The next call
    ///   tries again.
    package func synchronize() throws {
        condition.lock()
        defer { condition.unlock() }
        lastTicket += 1
        let ticket = lastTicket
        while true {
            if ticket <= settledThrough {
                if let error = failures.removeValue(forKey: ticket) { throw error }
                return
            }
            if isLeaderSyncing {
                condition.wait()
                continue
            }
            // Lead a sync covering every ticket handed out so far, whose changes are all done.
            isLeaderSyncing = true
            let coveredThrough = lastTicket
            condition.unlock()
            var syncError: (any Error)?
            do {
                try fileSystem.synchronizeDirectory(path)
            } catch {
                syncError = error
            }
            condition.lock()
            if let syncError {
                for failed in (settledThrough + 1)...coveredThrough {
                    failures[failed] = syncError
                }
            }
            settledThrough = coveredThrough
            isLeaderSyncing = false
            condition.broadcast()
        }
    }
}
