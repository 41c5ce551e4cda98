import Foundation

/// Lets concurrent callers share one expensive call (a directory sync, a file-system sync):
/// the mechanism of group commit.
///
/// Each caller first makes its own change and then calls ``join(_:)``, which returns once a
/// round that *started after* the call has succeeded. One caller at a time is the leader and
/// runs a round; callers that arrive during it wait, and the next leader's single round
/// covers all of them. Under load this turns N calls into a handful.
///
/// Thread safety: any thread may call ``join(_:)``; rounds run outside the lock, one at a time.
package final class GroupCommit: @unchecked Sendable {
    // @unchecked: the counters below are only read or written while `condition` is locked.
    private let condition = NSCondition()

    /// The ticket given to the most recent caller.
    private var lastTicket: UInt64 = 0
    /// Every ticket up to this one has an outcome: covered by a round, or an entry in `failures`.
    private var settledThrough: UInt64 = 0
    /// Tickets whose covering round failed, with the error, until their caller collects it.
    private var failures: [UInt64: any Error] = [:]
    private var isLeaderRunning = false

    package init() {}

    /// How many calls have arrived so far (for tests: a call counts as soon as it waits).
    package var callsArrived: UInt64 {
        condition.lock()
        defer { condition.unlock() }
        return lastTicket
    }

    /// Returns once a round that started after this call has succeeded, running it if this
    /// caller becomes the leader. `round` is told how many callers it covers (1: only the
    /// leader itself).
    ///
    /// - Throws: the error of the round that covered this call, when it failed. The next
    ///   call tries again.
    package func join(_ round: (_ callersCovered: UInt64) throws -> Void) throws {
        condition.lock()
        defer { condition.unlock() }
        lastTicket += 1
        let ticket = lastTicket
        while true {
            if ticket <= settledThrough {
                if let error = failures.removeValue(forKey: ticket) { throw error }
                return
            }
            if isLeaderRunning {
                condition.wait()
                continue
            }
            // Lead a round covering every ticket handed out so far, whose changes are all done.
            isLeaderRunning = true
            let coveredThrough = lastTicket
            condition.unlock()
            var roundError: (any Error)?
            do {
                try round(coveredThrough - settledThrough)
            } catch {
                roundError = error
            }
            condition.lock()
            if let roundError {
                for failed in (settledThrough + 1)...coveredThrough {
                    failures[failed] = roundError
                }
            }
            settledThrough = coveredThrough
            isLeaderRunning = false
            condition.broadcast()
        }
    }
}
