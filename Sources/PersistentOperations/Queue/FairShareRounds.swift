import Foundation

// Fair sharing (`Configuration.fairShareTagPrefix`): due work that waits for a slot in
// `State.ready` is ordered by priority, then by its group's turn, then by enqueue order. Each
// entry gets a turn as it enters the line: its group's next turn, but never one already
// passed (the turn of the last slot taken), so a group that had nothing waiting does not jump
// ahead with turns it did not use, and a group with a burst waiting takes one turn in each
// round: round-robin, each group in its own order, at O(log n) per entry as before.

/// The turns of the groups of operations that share the slots fairly.
struct FairShareRounds: Sendable {
    /// Each group's next turn; a group absent, or whose next turn has passed, starts at
    /// `current`.
    private var next: [String: UInt64] = [:]
    /// The turn of the last slot taken from the line.
    private(set) var current: UInt64 = 0

    /// The group of an operation with `tags`: its first tag, in sorted order, that starts with
    /// `prefix`; `""` (the group of the operations with none) otherwise.
    static func group(of tags: [String], prefix: String) -> String {
        var group: String?
        for tag in tags where tag.hasPrefix(prefix) {
            if group.map({ tag < $0 }) ?? true { group = tag }
        }
        return group ?? ""
    }

    /// The turn of an operation of `group` entering the line now.
    mutating func nextRound(for group: String) -> UInt64 {
        let round = max(next[group] ?? 0, current)
        next[group] = round + 1
        return round
    }

    /// An entry of turn `round` left the line for a slot.
    mutating func took(round: UInt64) {
        guard round > current else { return }
        current = round
        if next.count > 1_024 {
            // Groups whose next turn has passed start at `current` anyway.
            next = next.filter { $0.value > current }
        }
    }
}
