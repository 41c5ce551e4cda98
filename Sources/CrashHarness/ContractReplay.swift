import Foundation

/// The ordering rules of the at-least-once contract, checked by replaying an effects journal
/// from the start; shared by the demo's tally, the crash soak's verifier and the child-process tests.
///
/// Broken rules: an upload that started again after its record was removed, a retry count
/// that went down, an attempt number that did not go up, an upload completed twice within one
/// launch. Allowed, and counted in ``ranTwice``: an upload completed in two launches, because
/// a kill came after its work but before its record was removed.
package struct ContractReplay {
    /// Broken rules, for people; empty when the contract held.
    package private(set) var violations: [String] = []
    /// Uploads that completed in two (or more) launches.
    package private(set) var ranTwice: [Int] = []
    /// The number of `launch` events seen so far.
    package private(set) var launches = 0

    /// A replay of an empty journal.
    package init() {}

    private var indexByID: [String: Int] = [:]
    private var removed = Set<Int>()
    private var lastRetries: [Int: Int] = [:]
    private var lastAttempt: [Int: Int] = [:]
    private var completedInLaunch: [Int: Int] = [:]

    /// Applies the rules to the next event of the journal.
    package mutating func observe(_ event: JournalEvent) {
        switch event {
        case .launch:
            launches += 1
        case .acknowledged(let index, let id), .restored(let index, let id):
            indexByID[id] = index
        case .removed(let id):
            if let index = indexByID[id] { removed.insert(index) }
        case .started(let index, let attempt, let retries):
            if removed.contains(index) {
                violations.append("upload \(index) started again after it completed and its record was removed")
            }
            if retries < lastRetries[index, default: 0] {
                violations.append("the retry count of upload \(index) went down to \(retries)")
            }
            if attempt <= lastAttempt[index, default: 0] {
                violations.append("the attempt number of upload \(index) did not increase (\(attempt))")
            }
            lastRetries[index] = retries
            lastAttempt[index] = attempt
        case .done(let index):
            if let earlier = completedInLaunch[index] {
                if earlier == launches {
                    violations.append("upload \(index) completed twice in launch \(launches)")
                } else if !ranTwice.contains(index) {
                    ranTwice.append(index)
                }
            }
            completedInLaunch[index] = launches
        case .retry, .failed, .movedToFailed, .finished, .unknown:
            break
        }
    }
}
