import Foundation

// Fair sharing (`Configuration.fairShareTagPrefix`): due work that waits for a slot in
// `State.ready` is ordered by priority, then by its group's turn, then by enqueue order. Each
// entry gets a turn as it enters the line: its group's next turn, but never one already
// passed (the turn of the last slot taken), so a group that had nothing waiting does not jump
// ahead with turns it did not use, and a group with a burst waiting takes one turn in each
// round: round-robin, each group in its own order, at O(log n) per entry as before.
//
// Weights (`Configuration.fairShareWeights`): turns are counted in ticks, `ticksPerRound` to a
// round, and a group of weight w advances `ticksPerRound / w` ticks per entry, so that it takes
// w turns in each round (the ticks divide evenly for every weight from 1 to 16).

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

    /// The ticks of one round: a group of weight 1 takes one turn in it.
    static let ticksPerRound: UInt64 = 720_720
    /// The largest weight a group may have.
    static let maximumWeight = 1_000

    /// The turn of an operation of `group`, of `weight` turns per round, entering the line now.
    mutating func nextRound(for group: String, weight: Int = 1) -> UInt64 {
        let round = max(next[group] ?? 0, current)
        next[group] = round + Self.ticksPerRound / UInt64(min(max(weight, 1), Self.maximumWeight))
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
